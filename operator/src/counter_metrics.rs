//! Prometheus gauges of TableEntrySets' direct counter readouts, with
//! bounded cardinality: per set, switch and counter the totals, and per
//! set the top-N entries by rank (N at most 20), never one series per
//! entry. A set's series go when the set does.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use p4fleet_model::resources::Readout;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CounterLabels {
    pub namespace: String,
    pub name: String,
    pub switch: String,
    pub counter: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopLabels {
    pub namespace: String,
    pub name: String,
    pub counter: String,
    pub rank: String,
}

#[derive(Default)]
pub struct CounterMetrics {
    pub packets: Family<CounterLabels, Gauge>,
    pub bytes: Family<CounterLabels, Gauge>,
    pub top_packets: Family<TopLabels, Gauge>,
    /// The series each set has, to remove them (set -> labels).
    series: Mutex<Vec<((String, String), Series)>>,
}

enum Series {
    Total(CounterLabels),
    Top(TopLabels),
}

fn gauge(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl CounterMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "direct_counter_packets",
            "Packets counted by a TableEntrySet's table's direct counter, per switch, at the last readout",
            self.packets.clone(),
        );
        r.register(
            "direct_counter_bytes",
            "Bytes counted by a TableEntrySet's table's direct counter, per switch, at the last readout",
            self.bytes.clone(),
        );
        r.register(
            "direct_counter_top_packets",
            "Packets of the rank-th busiest entry of a TableEntrySet's table at the last readout",
            self.top_packets.clone(),
        );
    }

    /// Records a readout of set `namespace/name`: per switch totals and the
    /// set's top entries (replacing the previous readout's series).
    pub fn readout(
        &self,
        namespace: &str,
        name: &str,
        counter: &str,
        per_switch: &[(String, Readout)],
        top: &[u64],
    ) {
        self.forget(namespace, name);
        let mut series = self.series.lock().expect("series lock");
        let set = (namespace.to_string(), name.to_string());
        for (switch, r) in per_switch {
            let l = CounterLabels {
                namespace: namespace.into(),
                name: name.into(),
                switch: switch.clone(),
                counter: counter.into(),
            };
            self.packets.get_or_create(&l).set(gauge(r.packets));
            self.bytes.get_or_create(&l).set(gauge(r.bytes));
            series.push((set.clone(), Series::Total(l)));
        }
        for (i, p) in top.iter().enumerate() {
            let l = TopLabels {
                namespace: namespace.into(),
                name: name.into(),
                counter: counter.into(),
                rank: (i + 1).to_string(),
            };
            self.top_packets.get_or_create(&l).set(gauge(*p));
            series.push((set.clone(), Series::Top(l)));
        }
    }

    /// Removes every series of set `namespace/name`.
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut series = self.series.lock().expect("series lock");
        series.retain(|((ns, n), s)| {
            if ns != namespace || n != name {
                return true;
            }
            match s {
                Series::Total(l) => {
                    self.packets.remove(l);
                    self.bytes.remove(l);
                }
                Series::Top(l) => {
                    self.top_packets.remove(l);
                }
            }
            false
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_bounded_replaced_and_removed() {
        let m = CounterMetrics::default();
        let mut r = Registry::default();
        m.register(&mut r);
        let readout = |p| Readout {
            packets: p,
            bytes: p * 64,
            ..Readout::default()
        };
        m.readout("ns", "fw", "hits", &[("s1".into(), readout(10))], &[7, 3]);
        m.readout("ns", "fw", "hits", &[("s1".into(), readout(20))], &[9]);
        m.readout("ns", "other", "hits", &[("s1".into(), readout(1))], &[]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(
            text.contains(
                r#"direct_counter_packets{namespace="ns",name="fw",switch="s1",counter="hits"} 20"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"direct_counter_top_packets{namespace="ns",name="fw",counter="hits",rank="1"} 9"#
            ),
            "{text}"
        );
        assert!(
            !text.contains(r#"rank="2""#),
            "the old readout's ranks are gone: {text}"
        );
        m.forget("ns", "fw");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(!text.contains(r#"name="fw""#), "{text}");
        assert!(text.contains(r#"name="other""#), "{text}");
    }
}
