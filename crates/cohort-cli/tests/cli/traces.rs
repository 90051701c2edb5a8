//! `--features otlp` (contract OB4): with `OTEL_EXPORTER_OTLP_ENDPOINT` set,
//! `cohort worker` exports its spans through OTLP over HTTP/protobuf. The
//! collector is a stand-in in the test: a real HTTP server that takes the
//! exporter's `POST /v1/traces` requests and keeps their bodies (the
//! exporter itself is the real one).

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const EVENTS: &str = "4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8";

/// One request the collector took: its request line and body.
type Request = (String, Vec<u8>);

/// A collector on a free local port; every request is answered 200 with an
/// empty (valid) `ExportTraceServiceResponse`.
async fn collector() -> (u16, Arc<Mutex<Vec<Request>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let keep = Arc::clone(&keep);
            tokio::spawn(async move {
                let mut data = Vec::new();
                let mut buf = [0u8; 8192];
                // The head, then as much body as Content-Length says.
                let (head_end, length) = loop {
                    let Ok(n) = stream.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    data.extend_from_slice(&buf[..n]);
                    if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&data[..i]).to_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        break (i + 4, length);
                    }
                };
                while data.len() < head_end + length {
                    let Ok(n) = stream.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        break;
                    }
                    data.extend_from_slice(&buf[..n]);
                }
                let line = String::from_utf8_lossy(&data[..head_end])
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                let body = data[head_end..].to_vec();
                keep.lock().expect("lock").push((line, body));
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    )
                    .await;
            });
        }
    });
    (port, seen)
}

// contract: OB4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_exports_its_run_and_entity_spans_through_otlp() {
    let p = Project::new().await;
    assert_success(&p.cohort(&["schema", "migrate"]));
    p.db.exec(&format!(
        "CREATE TABLE events (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL); \
         INSERT INTO events SELECT i, '{TENANT}', '2020-01-01'::timestamptz + i * interval '1 second' \
         FROM generate_series(1, 5) AS i;"
    ))
    .await;
    p.write(
        "cohort-model.toml",
        &format!(
            "[[entity]]\nid = \"{EVENTS}\"\ntable = \"events\"\ncategory = \"events\"\nanchor = \"created_at\"\n\n\
             [rules.events]\nstrategy = \"purge\"\nperiod = \"30d\"\n"
        ),
    );
    p.write(
        "cohort.toml",
        &format!("[worker]\ntenants = [\"{TENANT}\"]\n"),
    );
    let (port, seen) = collector().await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let out = tokio::task::spawn_blocking({
        let mut c = p.command(&["worker", "--once", "--at", "2030-01-01T02:00:00Z"]);
        c.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
        move || c.output().expect("run the worker")
    })
    .await
    .expect("join");
    assert_success(&out);
    let requests = seen.lock().expect("lock").clone();
    assert!(
        !requests.is_empty(),
        "no OTLP request reached the collector"
    );
    assert!(
        requests
            .iter()
            .all(|(line, _)| line.starts_with("POST /v1/traces ")),
        "{:?}",
        requests.iter().map(|(l, _)| l).collect::<Vec<_>>()
    );
    let bodies: Vec<u8> = requests.iter().flat_map(|(_, b)| b.clone()).collect();
    let has = |needle: &str| bodies.windows(needle.len()).any(|w| w == needle.as_bytes());
    for span in ["cohort.occurrence", "cohort.run", "cohort.entity"] {
        assert!(has(span), "span {span} was not exported");
    }
    // The spans carry their fields, and the resource its service name.
    assert!(has("entity_type") && has("run_id"), "the spans' fields");
    assert!(has("service.name"), "the service name");
}
