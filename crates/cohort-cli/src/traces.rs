//! `--features otlp` (contract OB4): the library's `tracing` spans
//! (`cohort.occurrence`, `cohort.run`, `cohort.entity`) exported through
//! OpenTelemetry, OTLP over HTTP/protobuf, when `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; the exporter reads the
//! standard `OTEL_*` variables itself (headers, timeout). Spans are batched
//! on the SDK's own thread and flushed when the command ends.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::LevelFilter;

/// Ends the export when dropped: the spans still queued are sent.
pub(crate) struct Traces(SdkTracerProvider);

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("warning: flushing the traces failed: {e}");
        }
    }
}

/// The export layer, when an endpoint is configured; `None` otherwise.
pub(crate) fn layer<S>() -> Option<(Box<dyn Layer<S> + Send + Sync>, Traces)>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a> + Send + Sync,
{
    let configured = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    if !configured {
        return None;
    }
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("warning: traces are not exported: {e}");
            return None;
        }
    };
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("cohort")
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("cohort");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(LevelFilter::INFO)
        .boxed();
    Some((layer, Traces(provider)))
}
