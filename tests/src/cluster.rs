//! A real 3-node (or N-node) `nats-server` JetStream cluster on loopback.
//!
//! Every node gets its own server name (`n0`, `n1`, …), store directory and
//! log; all share one cluster name and each is given routes to every node
//! (itself included, as the NATS docs recommend for JetStream clusters, so
//! each node knows the full peer set from the start). Client and monitor
//! ports are picked by the server (`-1`) and read back from the log; route
//! ports must be known before the nodes start, so they are reserved up front.
//!
//! Readiness, without sleeps: every node answers
//! `/healthz?js-enabled-only=true` on its monitor port, then all nodes agree
//! on a JetStream meta leader in a meta group of N, then every node's plain
//! `/healthz` (which includes "JetStream is current") is 200.
//!
//! Nodes can be SIGKILLed and restarted on the same ports and store; all
//! nodes are killed on `Drop`.

use crate::nats::nats_server_binary;
use crate::producer::Topology;
use crate::Process;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One node of the cluster.
pub struct ClusterNode {
    /// Server name (`-n`), also the name JetStream reports for leaders and peers.
    pub name: String,
    /// Client port (0 until the first start has logged it).
    pub port: u16,
    /// HTTP monitoring port (0 until the first start has logged it).
    pub monitor_port: u16,
    /// Route (cluster) port, reserved before any node starts.
    pub cluster_port: u16,
    store: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl ClusterNode {
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A JetStream cluster of real `nats-server` processes.
pub struct NatsCluster {
    pub name: String,
    pub nodes: Vec<ClusterNode>,
    /// Holds every node's store and log; removed on drop.
    dir: tempfile::TempDir,
}

/// How long a node, or the whole cluster, may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

impl NatsCluster {
    /// Start `size` nodes (3 for a cluster that survives one node loss) and
    /// wait until JetStream has a meta leader that every node knows.
    pub fn start(size: usize) -> NatsCluster {
        assert!(size >= 1, "a cluster needs at least one node");
        let dir = tempfile::tempdir().expect("temp dir");
        let nodes = (0..size)
            .map(|i| {
                let name = format!("n{i}");
                ClusterNode {
                    store: dir.path().join(&name).join("js"),
                    log: dir.path().join(format!("{name}.log")),
                    name,
                    port: 0,
                    monitor_port: 0,
                    cluster_port: crate::free_port(),
                    child: None,
                }
            })
            .collect();
        let mut cluster = NatsCluster { name: "bmcfleet-test".into(), nodes, dir };
        for i in 0..size {
            cluster.spawn(i);
        }
        for i in 0..size {
            cluster.wait_node_ready(i);
        }
        cluster.wait_meta_leader();
        cluster
    }

    fn routes(&self) -> String {
        self.nodes.iter().map(|n| format!("nats://127.0.0.1:{}", n.cluster_port)).collect::<Vec<_>>().join(",")
    }

    fn spawn(&mut self, i: usize) {
        let routes = self.routes();
        let cluster_name = self.name.clone();
        let node = &mut self.nodes[i];
        assert!(node.child.is_none(), "node {} is already running", node.name);
        std::fs::create_dir_all(&node.store).expect("store dir");
        let port = |p: u16| if p == 0 { "-1".to_owned() } else { p.to_string() };
        // Truncate the log: readiness parses ports from it, and a restart
        // must not be fooled by the previous run's lines.
        let log = std::fs::File::create(&node.log).expect("log file");
        let child = Command::new(nats_server_binary())
            .args(["-js", "-n", &node.name, "-a", "127.0.0.1", "-p", &port(node.port), "-m", &port(node.monitor_port)])
            .args([
                "--cluster_name",
                &cluster_name,
                "--cluster",
                &format!("nats://127.0.0.1:{}", node.cluster_port),
                "--routes",
                &routes,
            ])
            .arg("-sd")
            .arg(&node.store)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start nats-server {}: {e}", node.name));
        node.child = Some(child);
    }

    /// Ports from the log, then `/healthz?js-enabled-only=true`.
    fn wait_node_ready(&mut self, i: usize) {
        let end = Instant::now() + READY_TIMEOUT;
        loop {
            let node = &mut self.nodes[i];
            if let Some(status) = node.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("nats-server {} exited ({status}) while starting; log:\n{}", node.name, node.log_text());
            }
            if let Some((client, monitor)) = crate::nats::ports_from_log(&node.log_text()) {
                node.port = client;
                node.monitor_port = monitor;
                if http_get(monitor, "/healthz?js-enabled-only=true").is_some_and(|(code, _)| code == 200) {
                    return;
                }
            }
            if Instant::now() > end {
                panic!("nats-server {} did not become ready; log:\n{}", node.name, node.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every running node reports the same meta leader for a meta group of
    /// the cluster's full size, and its plain `/healthz` is 200 (JetStream current).
    pub fn wait_meta_leader(&self) {
        let end = Instant::now() + READY_TIMEOUT;
        loop {
            let running: Vec<&ClusterNode> = self.nodes.iter().filter(|n| n.is_running()).collect();
            let leaders: Vec<Option<String>> = running
                .iter()
                .map(|n| {
                    let jsz = self.jsz(n)?;
                    let meta = jsz.get("meta_cluster")?;
                    let size = meta.get("cluster_size").and_then(|v| v.as_u64())?;
                    let leader = meta.get("leader").and_then(|v| v.as_str()).filter(|l| !l.is_empty())?;
                    (size == self.nodes.len() as u64).then(|| leader.to_owned())
                })
                .collect();
            let agreed = leaders.first().cloned().flatten().filter(|l| leaders.iter().all(|x| x.as_deref() == Some(l)));
            if agreed.is_some()
                && running.iter().all(|n| http_get(n.monitor_port, "/healthz").is_some_and(|(c, _)| c == 200))
            {
                return;
            }
            if Instant::now() > end {
                panic!("the JetStream meta group did not settle (leaders seen: {leaders:?}); logs:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until JetStream can place a stream with `replicas` replicas: a
    /// throw-away stream is created (retrying while the meta group settles
    /// and API requests time out) and deleted again. A healthy meta leader
    /// alone is not enough on a loaded machine: the first R3 placement right
    /// after the cluster forms can still time out, and the bmcfleet binaries
    /// exit when their start-up stream set-up fails.
    pub async fn wait_for_placement(&self, replicas: usize) {
        use async_nats::jetstream::stream;
        let js = async_nats::jetstream::new(self.client().await);
        let name = format!("HARNESS_PLACEMENT_R{replicas}");
        let end = Instant::now() + READY_TIMEOUT;
        loop {
            let config = stream::Config {
                name: name.clone(),
                subjects: vec![format!("harness.placement.r{replicas}")],
                num_replicas: replicas,
                storage: stream::StorageType::File,
                ..Default::default()
            };
            let last = match js.get_or_create_stream(config).await {
                Ok(mut s) => match s.info().await {
                    Ok(info)
                        if info
                            .cluster
                            .as_ref()
                            .is_some_and(|c| c.leader.is_some() && c.replicas.len() + 1 == replicas) =>
                    {
                        match js.delete_stream(&name).await {
                            Ok(_) => return,
                            Err(e) => e.to_string(),
                        }
                    }
                    Ok(info) => format!("not placed yet: {:?}", info.cluster),
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() > end {
                panic!("JetStream could not place an R{replicas} stream: {last}; logs:\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The node's `/jsz` report, parsed.
    pub fn jsz(&self, node: &ClusterNode) -> Option<serde_json::Value> {
        let (code, body) = http_get(node.monitor_port, "/jsz")?;
        (code == 200).then(|| serde_json::from_str(&body).ok()).flatten()
    }

    /// All client URLs, comma-separated (the `--nats-url` form for a cluster).
    pub fn urls(&self) -> String {
        self.nodes.iter().map(ClusterNode::url).collect::<Vec<_>>().join(",")
    }

    /// A client that knows every node, so it fails over like the binaries do.
    pub async fn client(&self) -> async_nats::Client {
        let addrs: Vec<async_nats::ServerAddr> =
            self.nodes.iter().map(|n| n.url().parse().expect("server address")).collect();
        async_nats::ConnectOptions::new()
            .max_reconnects(None)
            .connect(addrs)
            .await
            .expect("connect to the test cluster")
    }

    /// Index of the node with this server name.
    pub fn index_of(&self, server_name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == server_name)
    }

    /// SIGKILL one node (its store survives for a restart).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start a killed node again on the same ports and store and wait until
    /// it is back in the meta group.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        self.wait_node_ready(i);
        self.wait_meta_leader();
    }

    pub fn store_root(&self) -> &Path {
        self.dir.path()
    }

    /// Every node's log, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes.iter().map(|n| format!("--- {} ---\n{}", n.name, n.log_text())).collect()
    }

    /// The gateway, connected to every node, with `replicas` JetStream replicas.
    pub fn gateway(&self, topo: &Topology, replicas: u8, extra: &[&str]) -> Process {
        let mut args = self.common_args(topo, replicas);
        args.extend(["--allow-sim".into(), "true".into()]);
        args.extend(["--ad-hoc-targets".into(), crate::producer::TEST_AD_HOC_TARGETS.into()]);
        args.extend(topo.gateway_sealing_args(extra));
        args.extend(extra.iter().map(|s| s.to_string()));
        Process::spawn("bmc-gateway", &args, &Self::env())
    }

    /// A worker, connected to every node, with `replicas` JetStream replicas.
    pub fn worker(
        &self,
        topo: &Topology,
        replicas: u8,
        id: &str,
        sim: std::net::SocketAddr,
        extra: &[&str],
    ) -> Process {
        let mut args = self.common_args(topo, replicas);
        args.extend(topo.worker_args(id));
        args.extend(["--sim-endpoint".into(), sim.to_string()]);
        args.extend(["--ad-hoc-targets".into(), crate::producer::TEST_AD_HOC_TARGETS.into()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        Process::spawn(&format!("bmc-worker:{id}"), &args, &Self::env())
    }

    /// Several processes on one host: no fixed metrics port (`BMCFLEET_METRICS_ADDR`,
    /// the environment twin of `--metrics-addr`), loopback only.
    fn env() -> [(&'static str, String); 1] {
        [("BMCFLEET_METRICS_ADDR", "127.0.0.1:0".into())]
    }

    fn common_args(&self, topo: &Topology, replicas: u8) -> Vec<String> {
        vec![
            "--nats-url".into(),
            self.urls(),
            "--partitions".into(),
            topo.partitions.to_string(),
            "--replicas".into(),
            replicas.to_string(),
            "--log-format".into(),
            "json".into(),
        ]
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}

/// A minimal HTTP/1.0 GET against a loopback monitor port: (status, body).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let code = resp.split_whitespace().nth(1)?.parse().ok()?;
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((code, body))
}
