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

/// Whether process `pid` holds UDP `port` and no other socket is bound to
/// it: a server that sets `SO_REUSEADDR` (ipmi_sim does) binds a port
/// another already holds, and then one of the two gets the datagrams.
pub fn holds_udp_alone(pid: u32, port: u16) -> bool {
    let all = inodes(port, &["/proc/net/udp", "/proc/net/udp6"], None);
    let own = own_sockets(pid);
    !all.is_empty() && all.iter().all(|i| own.contains(i))
}

fn holds(pid: u32, port: u16, tables: &[&str], state: Option<&str>) -> bool {
    let inodes = inodes(port, tables, state);
    own_sockets(pid).iter().any(|i| inodes.contains(i))
}

/// The socket inodes bound to `port` in `tables` (in `state`, if given).
fn inodes(port: u16, tables: &[&str], state: Option<&str>) -> HashSet<u64> {
    tables
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
        .collect()
}

/// The socket inodes among process `pid`'s open files.
fn own_sockets(pid: u32) -> HashSet<u64> {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else { return HashSet::new() };
    fds.filter_map(Result::ok)
        .filter_map(|fd| {
            let link = fs::read_link(fd.path()).ok()?;
            link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok()
        })
        .collect()
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
    fn a_udp_port_shared_with_another_socket_is_not_held_alone() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        assert!(holds_udp_alone(std::process::id(), port));
        assert!(!holds_udp_alone(1, port), "another process");
        // A second socket of another process on the port is the ipmi_sim
        // test's (`an_instance_is_ready_only_on_a_port_its_own_process_holds`).
    }

    /// A process holding `port` with SO_REUSEADDR (as ipmi_sim binds), until killed.
    fn reuse_binder(port: u16) -> std::process::Child {
        let code = format!(
            "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('127.0.0.1',{port}))\n\
             print('bound',flush=True)\nsys.stdin.read()"
        );
        let mut child = std::process::Command::new("python3")
            .args(["-c", &code])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "bound");
        child
    }

    #[test]
    fn a_udp_port_two_processes_bind_is_held_by_neither_alone() {
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut first = reuse_binder(port);
        assert!(holds_udp_alone(first.id(), port));
        let mut second = reuse_binder(port);
        assert!(holds_udp(second.id(), port) && holds_udp(first.id(), port), "both hold it");
        assert!(!holds_udp_alone(first.id(), port) && !holds_udp_alone(second.id(), port));
        second.kill().unwrap();
        second.wait().unwrap();
        assert!(holds_udp_alone(first.id(), port), "alone again");
        first.kill().unwrap();
        first.wait().unwrap();
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
