use std::sync::atomic::AtomicUsize;

use k8s_openapi::ByteString;
use kube::api::ObjectMeta;
use p4fleet_crds::{P4Program, Switch, VirtualSwitch};

use super::decode::tests::gzip;
use super::*;
use crate::controllers::entry_set::desired::tests::firewall;
use crate::reads::fixture::Cluster;

/// A cluster of ConfigMaps that counts GETs, and how many were in
/// flight at once (each takes `delay`).
#[derive(Default)]
struct Counting {
    cluster: Cluster,
    gets: AtomicUsize,
    delay: Duration,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

impl Reads for Counting {
    async fn switch(&self, n: &str) -> Result<Option<Switch>, kube::Error> {
        self.cluster.switch(n).await
    }
    async fn switches(&self) -> Result<Vec<Switch>, kube::Error> {
        self.cluster.switches().await
    }
    async fn program(&self, ns: &str, n: &str) -> Result<Option<P4Program>, kube::Error> {
        self.cluster.program(ns, n).await
    }
    async fn virtual_switch(
        &self,
        ns: &str,
        n: &str,
    ) -> Result<Option<VirtualSwitch>, kube::Error> {
        self.cluster.virtual_switch(ns, n).await
    }
    async fn virtual_switches(&self, ns: Option<&str>) -> Result<Vec<VirtualSwitch>, kube::Error> {
        self.cluster.virtual_switches(ns).await
    }
    async fn config_map(&self, ns: &str, n: &str) -> Result<Option<ConfigMap>, kube::Error> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.cluster.config_map(ns, n).await
    }
    async fn controller_revision(
        &self,
        ns: &str,
        n: &str,
    ) -> Result<Option<k8s_openapi::api::apps::v1::ControllerRevision>, kube::Error> {
        self.cluster.controller_revision(ns, n).await
    }
    async fn program_revisions(
        &self,
        ns: &str,
        p: &str,
    ) -> Result<Vec<k8s_openapi::api::apps::v1::ControllerRevision>, kube::Error> {
        self.cluster.program_revisions(ns, p).await
    }
    async fn entry_revisions(&self, ns: &str, uid: &str) -> Result<Vec<ConfigMap>, kube::Error> {
        self.cluster.entry_revisions(ns, uid).await
    }
    async fn artifact(
        &self,
        ns: &str,
        src: &p4fleet_crds::UrlSource,
    ) -> Result<Result<Vec<u8>, crate::artifacts::url_source::FetchError>, kube::Error> {
        self.cluster.artifact(ns, src).await
    }
}

const HEADER: &str = "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action drop\n";

fn cm(ns: &str, name: &str, rv: &str, labels: &[(&str, &str)], text: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            resource_version: Some(rv.into()),
            ..crate::reads::fixture::meta(name, Some(ns), labels)
        },
        data: Some([("entries".to_string(), text.to_string())].into()),
        ..Default::default()
    }
}

fn meta(c: &ConfigMap) -> Meta {
    PartialObjectMeta {
        metadata: c.metadata.clone(),
        ..Default::default()
    }
}

/// A cache whose index holds `cms`, over a counting cluster holding them.
fn cache(cms: Vec<ConfigMap>) -> (EntrySources, Counting) {
    let sources = EntrySources::default();
    sources
        .index
        .insert_for_tests(&cms.iter().map(meta).collect::<Vec<_>>());
    let reads = Counting {
        cluster: Cluster {
            config_maps: cms,
            ..Default::default()
        },
        ..Default::default()
    };
    (sources, reads)
}

fn from(json: serde_json::Value) -> Vec<EntriesSource> {
    serde_json::from_value(json).unwrap()
}

fn names(s: &Sources) -> Vec<String> {
    s.texts
        .iter()
        .map(|t| format!("{}/{}", t.config_map, t.key))
        .collect()
}

#[tokio::test]
async fn selectors_read_labelled_config_maps_of_the_namespace_in_name_order() {
    let (c, reads) = cache(vec![
        cm("ns", "part-2", "1", &[("t", "fw")], ""),
        cm("ns", "part-1", "1", &[("t", "fw")], ""),
        cm("ns", "other", "1", &[("t", "x")], ""),
        cm("elsewhere", "part-0", "1", &[("t", "fw")], ""),
    ]);
    let src = from(serde_json::json!([
        {"configMap": "other"},
        {"configMapSelector": {"matchLabels": {"t": "fw"}}}
    ]));
    let (s, problems) = c.read(&reads, "ns/s", "ns", &src).await.unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        names(&s),
        ["other/entries", "part-1/entries", "part-2/entries"]
    );

    // A selector matching none is a problem naming the field, unless optional.
    let none = from(serde_json::json!([{"configMapSelector": {"matchLabels": {"t": "y"}}}]));
    let (_, problems) = c.read(&reads, "ns/s", "ns", &none).await.unwrap();
    assert_eq!(problems, [SourceProblem::NoneSelected { index: 0 }]);
    assert_eq!(
        problems[0].to_string(),
        "spec.entriesFrom[0].configMapSelector matches no ConfigMap"
    );
    let optional = from(
        serde_json::json!([{"configMapSelector": {"matchLabels": {"t": "y"}}, "optional": true}]),
    );
    assert!(
        c.read(&reads, "ns/s", "ns", &optional)
            .await
            .unwrap()
            .1
            .is_empty()
    );
    // Named but absent from the index: asked for (the watch may lag), and
    // not found.
    let gets = reads.gets.load(Ordering::Relaxed);
    let missing = from(serde_json::json!([{"configMap": "nope"}]));
    let (_, problems) = c.read(&reads, "ns/s", "ns", &missing).await.unwrap();
    assert_eq!(problems, [SourceProblem::NotFound("nope".into())]);
    assert_eq!(reads.gets.load(Ordering::Relaxed), gets + 1);
    // What each set read is known to the watch's mapper.
    let readers = c.readers();
    let read_by = |cm: &str| readers.of("ns", cm).iter().any(|(s, _)| s == "ns/s");
    assert!(!read_by("part-1"));
    c.read(&reads, "ns/s", "ns", &src).await.unwrap();
    assert!(read_by("part-1"));
    assert!(!read_by("nope"));
}

#[tokio::test]
async fn a_sets_config_maps_are_fetched_a_few_at_once_and_kept_in_order() {
    let maps: Vec<ConfigMap> = (0..10)
        .map(|i| cm("ns", &format!("part-{i}"), "1", &[("t", "fw")], ""))
        .collect();
    let (c, mut reads) = cache(maps);
    reads.delay = Duration::from_millis(20);
    let src = from(serde_json::json!([
        {"configMap": "part-9"},
        {"configMap": "missing"},
        {"configMapSelector": {"matchLabels": {"t": "fw"}}}
    ]));
    let (s, problems) = c.read(&reads, "ns/s", "ns", &src).await.unwrap();
    assert_eq!(problems, [SourceProblem::NotFound("missing".into())]);
    let mut want = vec!["part-9/entries".to_string()];
    want.extend((0..10).map(|i| format!("part-{i}/entries")));
    assert_eq!(names(&s), want);
    // part-9 twice, one GET (the second waits for the first one's copy);
    // "missing" asked for once.
    assert_eq!(reads.gets.load(Ordering::Relaxed), 11);
    assert_eq!(reads.most_in_flight.load(Ordering::SeqCst), FETCHES_AT_ONCE);
}

#[tokio::test]
async fn a_named_config_map_the_watch_has_not_delivered_is_read_and_its_event_then_ignored() {
    let text = format!("{HEADER}10.0.0.1 10.0.0.2\n");
    let late = cm("ns", "late", "5", &[], &text);
    let (c, mut reads) = cache(vec![]);
    reads.cluster.config_maps.push(late.clone());
    let src = from(serde_json::json!([{"configMap": "late"}]));
    let (s, problems) = c.read(&reads, "ns/s", "ns", &src).await.unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(names(&s), ["late/entries"]);
    // Its watch event then comes, for the version the set read: no sync;
    // a later version syncs it.
    let readers = c.readers().of("ns", "late");
    assert_eq!(readers, [("ns/s".to_string(), "5".to_string())]);
    assert!(to_sync(readers.clone(), ["ns/s".to_string()], Some("5")).is_empty());
    assert_eq!(to_sync(readers, [], Some("6")), ["ns/s"]);
}

#[test]
fn a_config_map_event_syncs_stale_readers_and_new_selectors_once() {
    let readers = vec![
        ("ns/read-5".to_string(), "5".to_string()),
        ("ns/read-4".to_string(), "4".to_string()),
        ("ns/missed".to_string(), String::new()),
    ];
    let selecting = ["ns/read-5", "ns/read-4", "ns/new"].map(String::from);
    let mut hit = to_sync(readers.clone(), selecting.clone(), Some("5"));
    hit.sort();
    assert_eq!(hit, ["ns/missed", "ns/new", "ns/read-4"]);
    // No version known: every reader and selector, each once.
    let mut all = to_sync(readers, selecting, None);
    all.sort();
    assert_eq!(all, ["ns/missed", "ns/new", "ns/read-4", "ns/read-5"]);
}

#[tokio::test]
async fn gzip_binary_data_is_read_and_bad_keys_are_named() {
    let mut packed = cm("ns", "packed", "1", &[], "");
    packed.data = None;
    packed.binary_data = Some(
        [
            (
                "a.entries.txt.gz".to_string(),
                ByteString(gzip(format!("{HEADER}10.0.0.1 10.0.0.2\n").as_bytes())),
            ),
            (
                "b.entries.txt.gz".to_string(),
                ByteString(b"garbage".to_vec()),
            ),
        ]
        .into(),
    );
    let (c, reads) = cache(vec![packed]);
    let src = from(serde_json::json!([{"configMap": "packed"}]));
    let (s, problems) = c.read(&reads, "ns/s", "ns", &src).await.unwrap();
    assert_eq!(names(&s), ["packed/a.entries.txt.gz"]);
    assert!(s.texts[0].text.get().unwrap().contains("10.0.0.1 10.0.0.2"));
    assert_eq!(problems.len(), 1);
    assert!(
        matches!(&problems[0], SourceProblem::Unreadable { config_map, key, error: DecodeError::Gzip(_) }
            if config_map == "packed" && key == "b.entries.txt.gz"),
        "{problems:?}"
    );
    assert_eq!(problems[0].reason(), "SourceUnreadable");
}

#[tokio::test]
async fn a_parsed_gzip_text_is_held_compressed_and_decoded_again_for_another_schema() {
    let text = format!(
        "{HEADER}{}",
        "10.0.0.1 10.0.0.2\n10.0.0.3 10.0.0.4\n".repeat(50)
    );
    let packed = gzip(text.as_bytes());
    let mut c = cm("ns", "packed", "1", &[], "");
    c.data = None;
    c.binary_data = Some([("e.gz".to_string(), ByteString(packed.clone()))].into());
    let (c, reads) = cache(vec![c]);
    let src = from(serde_json::json!([{"configMap": "packed"}]));
    let (s, problems) = c.read(&reads, "ns/a", "ns", &src).await.unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(s.texts[0].text.held_bytes(), packed.len() + text.len());
    let schema = firewall();
    let digest = schema_digest(&schema);
    // Set a parses it; then set b with another schema (here: another
    // option) parses it again, without a GET.
    for (set, mask_host_bits) in [("ns/a", false), ("ns/b", true)] {
        let (s, _) = c.read(&reads, set, "ns", &src).await.unwrap();
        let opts = ParseOptions { mask_host_bits };
        let p = c
            .parsed(set, "ns", &s.texts[0], &schema, digest, opts)
            .await;
        assert_eq!(p.entries.len(), 100);
        // The cache keeps the parse and the compressed bytes, not the text.
        assert_eq!(s.texts[0].text.held_bytes(), packed.len());
    }
    assert_eq!(reads.gets.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_config_map_is_fetched_and_parsed_once_per_resource_version_and_shared() {
    let text = format!("{HEADER}10.0.0.1 10.0.0.2\n10.0.0.3 10.0.0.4\n");
    let (c, reads) = cache(vec![cm("ns", "fw", "7", &[], &text)]);
    let src = from(serde_json::json!([{"configMap": "fw"}]));
    let schema = firewall();
    let digest = schema_digest(&schema);
    let opts = ParseOptions::default();
    let mut seen = Vec::new();
    // Two sets, three syncs each: one GET, one parse, one shared result.
    for _ in 0..3 {
        for set in ["ns/a", "ns/b"] {
            c.begin(set);
            let (s, _) = c.read(&reads, set, "ns", &src).await.unwrap();
            seen.push(
                c.parsed(set, "ns", &s.texts[0], &schema, digest, opts)
                    .await,
            );
            c.finish(set);
        }
    }
    let parses = |c: &EntrySources| {
        c.metrics
            .parses
            .get_or_create(&NamespaceLabel {
                namespace: "ns".into(),
            })
            .get()
    };
    assert_eq!(reads.gets.load(Ordering::Relaxed), 1);
    assert_eq!(parses(&c), 1);
    assert!(seen.iter().all(|p| Arc::ptr_eq(p, &seen[0])));
    assert_eq!(seen[0].entries.len(), 2);

    // A new resourceVersion: fetched and parsed once more, for both sets.
    let changed = cm("ns", "fw", "8", &[], &format!("{text}10.0.0.5 10.0.0.6\n"));
    let (c2, reads2) = (c, {
        let mut r = reads;
        r.cluster.config_maps = vec![changed.clone()];
        r
    });
    {
        let mut w = c2.index.writer.lock().unwrap();
        w.as_mut()
            .unwrap()
            .apply_watcher_event(&watcher::Event::Apply(meta(&changed)));
    }
    for set in ["ns/a", "ns/b"] {
        c2.begin(set);
        let (s, _) = c2.read(&reads2, set, "ns", &src).await.unwrap();
        let p = c2
            .parsed(set, "ns", &s.texts[0], &schema, digest, opts)
            .await;
        assert_eq!(p.entries.len(), 3);
        c2.finish(set);
    }
    assert_eq!(reads2.gets.load(Ordering::Relaxed), 2);
    assert_eq!(parses(&c2), 2);
    // The old version's parse is gone; deleting both sets empties the cache.
    assert_eq!(c2.held(), (1, 1));
    c2.release("ns/a");
    assert_eq!(c2.held(), (1, 1));
    c2.release("ns/b");
    assert_eq!(c2.held(), (0, 0));
}

#[test]
fn sets_are_requeued_by_name_or_selector_in_their_namespace() {
    let set: p4fleet_crds::TableEntrySet = serde_json::from_value(serde_json::json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {"virtualSwitchRef": "vs", "table": "t", "entriesFrom": [
            {"configMap": "one"}, {"configMapSelector": {"matchLabels": {"t": "fw"}}}
        ]}
    }))
    .unwrap();
    let yes = |ns, name, labels: &[(&str, &str)]| {
        reads_config_map(&set, &meta(&cm(ns, name, "1", labels, "")))
    };
    assert!(yes("ns", "one", &[]));
    assert!(yes("ns", "two", &[("t", "fw")]));
    assert!(!yes("ns", "two", &[("t", "x")]));
    assert!(!yes("other", "one", &[]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reads_of_one_config_map_fetch_it_once() {
    let text = format!("{HEADER}10.0.0.1 10.0.0.2\n");
    let (c, reads) = cache(vec![cm("ns", "fw", "7", &[], &text)]);
    let src = from(serde_json::json!([{"configMap": "fw"}]));
    // A set's own sync and a VirtualSwitch re-applying it, at once.
    let (a, b) = tokio::join!(
        c.read(&reads, "ns/a", "ns", &src),
        c.read(&reads, "ns/b", "ns", &src)
    );
    assert_eq!(names(&a.unwrap().0), ["fw/entries"]);
    assert_eq!(names(&b.unwrap().0), ["fw/entries"]);
    assert_eq!(reads.gets.load(Ordering::Relaxed), 1);
    assert!(
        c.lock_fetching().is_empty(),
        "gates are dropped when unused"
    );
}
