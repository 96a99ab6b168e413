//! Why each reconcile ran: `p4fleet_reconcile_triggers_total{kind, trigger}`.
//!
//! kube-runtime says why it starts a reconcile only in the span it opens
//! around it ("reconciling object", fields `object.ref` and
//! `object.reason`); the reconciler itself never sees the reason. A tracing
//! layer ([`TriggerLayer`]) reads those two fields as each span opens and
//! counts them by kind and trigger ([`trigger_of`]), whatever the log level
//! (telemetry.rs gives it its own filter). This is how an idle round is
//! broken down into its periodic checks, watch events and device changes
//! (docs/performance.md says what an idle round runs).

use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The span kube-runtime opens around every reconcile.
pub const SPAN_NAME: &str = "reconciling object";

/// Labels: the reconciled kind and what triggered the reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TriggerLabels {
    pub kind: String,
    pub trigger: String,
}

/// The process's counts (one operator per process; the layer is installed
/// before the metrics registry exists, so both share this family).
pub fn counts() -> &'static Family<TriggerLabels, Counter> {
    static COUNTS: OnceLock<Family<TriggerLabels, Counter>> = OnceLock::new();
    COUNTS.get_or_init(Family::default)
}

/// The kind of a kube-runtime object reference as it displays
/// (`Kind.version.group/name[.namespace]`).
pub fn kind_of(obj_ref: &str) -> &str {
    obj_ref
        .split_once('/')
        .map_or(obj_ref, |(typ, _)| typ)
        .split('.')
        .next()
        .unwrap_or_default()
}

/// A trigger label from kube-runtime's `ReconcileReason` as it displays:
/// `requeue` (the reconciler's own `Action::requeue`: periodic checks and
/// resyncs), `error_retry`, `object_updated` (a watch event of the object
/// itself), `related:<Kind>` (a mapped watch event of another kind),
/// `device_change` (`reconcile_on`, which p4fleet uses only for
/// device changes: `controllers::on_device_changes`), `bulk`, `other`.
pub fn trigger_of(reason: &str) -> String {
    match reason {
        "reconciler requested retry" => "requeue".into(),
        "error policy requested retry" => "error_retry".into(),
        "object updated" => "object_updated".into(),
        "unknown" => "device_change".into(),
        "bulk reconcile requested" => "bulk".into(),
        r => match r.strip_prefix("related object updated: ") {
            Some(obj) => format!("related:{}", kind_of(obj)),
            None => "other".into(),
        },
    }
}

/// Counts every reconcile span by kind and trigger into [`counts`].
pub struct TriggerLayer;

#[derive(Default)]
struct Fields {
    obj_ref: Option<String>,
    reason: Option<String>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "object.ref" => self.obj_ref = Some(format!("{value:?}")),
            "object.reason" => self.reason = Some(format!("{value:?}")),
            _ => {}
        }
    }
}

/// The trigger of a reconcile span, kept in the span's extensions so
/// that the reconcile running inside it can read it ([`current`]).
#[derive(Clone, Debug)]
struct Trigger(String);

impl<S> Layer<S> for TriggerLayer
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != SPAN_NAME {
            return;
        }
        let mut f = Fields::default();
        attrs.record(&mut f);
        if let (Some(obj_ref), Some(reason)) = (f.obj_ref, f.reason) {
            let trigger = trigger_of(&reason);
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(Trigger(trigger.clone()));
            }
            counts()
                .get_or_create(&TriggerLabels {
                    kind: kind_of(&obj_ref).to_string(),
                    trigger,
                })
                .inc();
        }
    }
}

/// The trigger label of the reconcile running in the current task (read
/// from the span kube-runtime opened around it, or a parent of the current span), None outside a
/// reconcile or without [`TriggerLayer`] on a registry.
pub fn current() -> Option<String> {
    tracing::Span::current()
        .with_subscriber(|(id, dispatch)| {
            let registry = dispatch.downcast_ref::<tracing_subscriber::Registry>()?;
            let span = registry.span(id)?;
            // The reconcile span or one of its parents (a stage's span).
            span.scope()
                .find_map(|s| s.extensions().get::<Trigger>().map(|t| t.0.clone()))
        })
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_triggers_come_from_kube_runtimes_display_forms() {
        assert_eq!(kind_of("Switch.v1alpha1.p4fleet.dev/sw-1"), "Switch");
        assert_eq!(
            kind_of("TableEntrySet.v1alpha1.p4fleet.dev/acl.default"),
            "TableEntrySet"
        );
        assert_eq!(trigger_of("reconciler requested retry"), "requeue");
        assert_eq!(trigger_of("error policy requested retry"), "error_retry");
        assert_eq!(trigger_of("object updated"), "object_updated");
        assert_eq!(trigger_of("unknown"), "device_change");
        assert_eq!(
            trigger_of("related object updated: Switch.v1alpha1.p4fleet.dev/sw-2"),
            "related:Switch"
        );
        assert_eq!(
            trigger_of("related object updated: ConfigMap.v1./cm.default"),
            "related:ConfigMap"
        );
        assert_eq!(trigger_of("something custom"), "other");
    }

    #[test]
    fn the_layer_counts_reconcile_spans_only() {
        use tracing_subscriber::layer::SubscriberExt;
        let sub = tracing_subscriber::registry().with(TriggerLayer);
        let label = TriggerLabels {
            kind: "Probe".into(),
            trigger: "requeue".into(),
        };
        let before = counts().get_or_create(&label).get();
        tracing::subscriber::with_default(sub, || {
            let reason = "reconciler requested retry";
            let _s = tracing::info_span!(
                "reconciling object",
                "object.ref" = %"Probe.v1.x/a",
                object.reason = %reason
            );
            let _other = tracing::info_span!("something else", "object.ref" = %"Probe.v1.x/a");
        });
        assert_eq!(counts().get_or_create(&label).get(), before + 1);
    }

    #[test]
    fn a_reconcile_reads_its_own_trigger() {
        use tracing_subscriber::layer::SubscriberExt;
        let sub = tracing_subscriber::registry().with(TriggerLayer);
        tracing::subscriber::with_default(sub, || {
            assert_eq!(current(), None, "outside a reconcile");
            let span = tracing::info_span!(
                "reconciling object",
                "object.ref" = %"Probe.v1.x/b",
                object.reason = %"related object updated: ConfigMap.v1./cm.ns"
            );
            let _in = span.enter();
            assert_eq!(current().as_deref(), Some("related:ConfigMap"));
            let _inner = tracing::info_span!("a stage inside").entered();
            assert_eq!(
                current().as_deref(),
                Some("related:ConfigMap"),
                "in a stage"
            );
        });
    }
}
