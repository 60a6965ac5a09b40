// cephnode-exporter's monitoring mixin: the recording rules (prometheusRules), the alerts
// (prometheusAlerts) and the Grafana dashboards (grafanaDashboards), from one _config
// (config.libsonnet). The layout of ceph/ceph monitoring/ceph-mixin (mixin.libsonnet,
// config.libsonnet) and prometheus/node_exporter docs/node-mixin; alerts/README.md,
// "Monitoring mixin", says how to import it beside them.
(import 'config.libsonnet')
+ (import 'rules.libsonnet')
+ (import 'alerts.libsonnet')
+ (import 'dashboards.libsonnet')
