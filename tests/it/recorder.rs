//! The process's metrics recorder, installed once for every test of this binary: a debugging
//! recorder, read back by `engine_lease::metered`, and the payments example's Prometheus
//! recorder, which its `GET /metrics` renders (`payments::metrics_are_served`), side by side
//! behind a fanout. A process has one global recorder: a second `set_global_recorder` fails.

use std::sync::OnceLock;

use metrics_exporter_prometheus::PrometheusHandle;
use metrics_util::debugging::{DebuggingRecorder, Snapshotter};
use metrics_util::layers::FanoutBuilder;

/// What the tests read the recorder through.
pub(crate) struct Recorders {
    /// The debugging recorder's snapshots.
    pub(crate) snapshotter: Snapshotter,
    /// The Prometheus recorder's handle, for the payments example's `Config::metrics`.
    pub(crate) prometheus: PrometheusHandle,
}

/// The recorders, installed at the first call.
pub(crate) fn installed() -> &'static Recorders {
    static RECORDERS: OnceLock<Recorders> = OnceLock::new();
    RECORDERS.get_or_init(|| {
        let debugging = DebuggingRecorder::new();
        let snapshotter = debugging.snapshotter();
        let prometheus = crate::payments::payments::prometheus().build_recorder();
        let handle = prometheus.handle();
        let fanout = FanoutBuilder::default()
            .add_recorder(debugging)
            .add_recorder(prometheus)
            .build();
        metrics::set_global_recorder(fanout).expect(
            "no other recorder in this binary (build the payments apps with default_config())",
        );
        Recorders {
            snapshotter,
            prometheus: handle,
        }
    })
}
