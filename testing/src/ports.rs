//! Which process holds a loopback port.
//!
//! A launcher picks a free port by binding port 0 and closing it, then
//! starts a server on it. Between the two another launcher can be handed
//! the same port: one server binds it, the other fails and exits, and both
//! launchers' readiness probes are answered by the survivor. A launcher is
//! ready only when the process it started holds the port; these read that
//! from `/proc` (Linux: the socket inodes `/proc/net/{tcp,udp}{,6}` list
//! for the port, among the process's open files).

use std::collections::HashSet;
use std::fs;

/// Whether process `pid` holds a UDP socket bound to `port`.
pub fn holds_udp(pid: u32, port: u16) -> bool {
    holds(pid, port, &["/proc/net/udp", "/proc/net/udp6"], None)
}

/// Whether process `pid` listens on TCP `port`.
pub fn listens_tcp(pid: u32, port: u16) -> bool {
    // State 0A: LISTEN.
    holds(pid, port, &["/proc/net/tcp", "/proc/net/tcp6"], Some("0A"))
}

fn holds(pid: u32, port: u16, tables: &[&str], state: Option<&str>) -> bool {
    let inodes: HashSet<u64> = tables
        .iter()
        .filter_map(|table| fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let (_, local_port) = fields.get(1)?.rsplit_once(':')?;
                    let matches = u16::from_str_radix(local_port, 16).ok()? == port
                        && state.is_none_or(|s| fields.get(3) == Some(&s));
                    matches.then(|| fields.get(9)?.parse().ok())?
                })
                .collect::<Vec<u64>>()
        })
        .collect();
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.filter_map(Result::ok).any(|fd| {
        fs::read_link(fd.path()).ok().is_some_and(|link| {
            link.to_str()
                .and_then(|l| l.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok())
                .is_some_and(|inode| inodes.contains(&inode))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, UdpSocket};

    #[test]
    fn a_udp_port_is_held_only_while_bound_by_this_process() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        assert!(holds_udp(std::process::id(), port));
        assert!(!holds_udp(1, port), "another process");
        drop(socket);
        assert!(!holds_udp(std::process::id(), port));
    }

    #[test]
    fn a_tcp_port_is_held_only_while_listening() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listens_tcp(std::process::id(), port));
        assert!(!holds_udp(std::process::id(), port), "not as UDP");
        drop(listener);
        assert!(!listens_tcp(std::process::id(), port));
    }
}
