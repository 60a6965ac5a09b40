// Alert rules for cephnode-exporter, manifested as alerts/cephnode-alerts.yml by
// `make mixin`. Severity: critical pages, warning makes a ticket, info is not routed
// (alerts/alertmanager.yml). Every threshold and `for:` is in the settings table of
// alerts/README.md with the reason for its value, and in config.libsonnet; the recording
// rules they read are in rules.libsonnet. Each alert has a runbook in docs/runbooks/ and
// promtool tests in alerts/tests/ (tests/test_alerts.py fails the build otherwise).
//
// Detuned-node alerts follow the tuning checks (cephnode_tuning_check_failed / _warning):
// the same collection feeds `cephnode-exporter check`, so an alert and the report on the
// node never disagree, and a site profile that disables a check silences its alert. They
// fire only on hosts running OSDs (instance:cephnode_osd_sockets:max1h), and copy
// the check's subject to the label it names (controller, device, ceph_daemon, sysctl).
//
// The comments give the default values (twice the median, 1 ms, a 5-minute hold); the
// settings are config.libsonnet's fields.
//
// One file per group, in the order of the rule file; the runbook_url of every alert is
// added last, from runbookURLPattern (as kubernetes-mixin's
// alerts/add-runbook-links.libsonnet does), so no source repeats the base.
(import 'alerts/detuned.libsonnet')
+ (import 'alerts/regressions.libsonnet')
+ (import 'alerts/laggy.libsonnet')
+ (import 'alerts/network.libsonnet')
+ (import 'alerts/exporter.libsonnet')
+ (import 'alerts/drift.libsonnet')
+ {
  prometheusAlerts+:: {
    groups: [
      group {
        rules: [
          if std.objectHas(rule, 'alert') then
            rule { annotations+: { runbook_url: $._config.runbookURLPattern % rule.alert } }
          else rule
          for rule in group.rules
        ],
      }
      for group in super.groups
    ],
  },
}
