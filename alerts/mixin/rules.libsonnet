// Recording rules for cephnode-exporter: the aggregates the alerts and dashboards read,
// so that neither re-evaluates per-OSD series at 630 OSDs. Manifested as
// alerts/cephnode-rules.yml by `make mixin`.
//
// Names are level:metric:operations (Prometheus docs, "Recording rules"): the level lists
// the labels kept besides cluster and instance-like ones, operations are newest first
// ("quantile_ceph_daemon_p99_rate5m" = a quantile over OSDs of each OSD's p99 of the
// 5-minute rate). Every aggregation says by or without. Every threshold and window is
// in the settings table of alerts/README.md, and those that are settings in
// config.libsonnet.
//
// Label conventions: every exporter target has instance="<host>:10060" and cluster="<name>";
// the mgr target (job ceph) has the same cluster label. Joins between the two use
// on (cluster, ceph_daemon). `phi` is the exporter's: which quantile of one latency
// distribution its gauges hold (docs/metrics.md); `quantile` is ours: which quantile over
// series (OSDs, hosts) a quantile() aggregation below recorded.
//
// One file per group, in the order of the rule file. The comments give the default values
// (5 OSDs, 10 us); the settings are config.libsonnet's fields.
(import 'rules/osd.libsonnet')
+ (import 'rules/pgs.libsonnet')
+ (import 'rules/cluster.libsonnet')
+ (import 'rules/node.libsonnet')
+ (import 'rules/network.libsonnet')
+ (import 'rules/drift.libsonnet')
