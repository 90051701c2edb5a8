//! Shared test support: a fresh database per test (see `cohort-testdb`) and
//! helpers to install Cohort's tables.
#![allow(dead_code, unreachable_pub)]

pub use cohort_testdb::TestDb;

use cohort::schema::{SchemaName, ddl};

/// A fresh database with Cohort's tables installed in `schema`.
pub async fn db_with_cohort(schema: &str) -> (TestDb, SchemaName) {
    let db = TestDb::new().await;
    let schema = SchemaName::new(schema).expect("valid schema name");
    db.exec(&ddl(&schema)).await;
    (db, schema)
}

/// Captures `tracing` output of the current thread while the guard lives.
pub struct LogCapture {
    buf: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl LogCapture {
    pub fn start() -> LogCapture {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || CaptureWriter(writer.clone()))
            .finish();
        LogCapture {
            buf,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().expect("log buffer")).into_owned()
    }
}

struct CaptureWriter(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CaptureWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
