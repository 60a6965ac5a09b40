// The settings of the cephnode-exporter mixin. Override them in your own jsonnet:
//
//   (import 'cephnode-exporter/alerts/mixin/mixin.libsonnet') + {
//     _config+:: { cephnodeSelector: 'job="node-ceph"', runbookURLPattern: 'https://wiki/%s' },
//   }
//
// alerts/README.md ("Settings") says why each default has its value; the defaults are
// today's rules, and `make mixin` writes the committed YAML and JSON with them.
// Thresholds are numbers (formatted with %g into the expressions), hold times and
// intervals Prometheus durations. Rate windows are not settings: they are part of the
// recording rules' names (`mean_rate2m`, `ratio_rate10m`), which dashboards and
// alerts read.
{
  _config+:: {
    // ---------------------------------------------------------------- selectors, labels

    // The exporter's scrape job, as in alerts/prometheus.yml: CephNodeExporterDown reads
    // up{<this>}. The exporter's own series (cephnode_*) need no selector: no other
    // exporter writes that prefix.
    cephnodeSelector: 'job="cephnode"',

    // The mgr's prometheus module (the ceph_* series: ceph_osd_metadata, ceph_osd_up,
    // ceph_pg_*, ceph_health_detail, ceph_osd_flag_noout). Empty: no matcher, as today's
    // rules (ceph-mixin selects them without a job too). Set it, e.g. 'job="ceph"', where
    // another job exports ceph_* series of the same names.
    cephSelector: '',

    // The label that tells clusters apart, a target label on both jobs
    // (alerts/prometheus.yml). Every aggregation and join of the rules keeps it; the
    // dashboards' queries use it. Recording rule names keep the level `cluster`
    // (cluster:ceph_latency_context:max10m): a name, not the label. alerts/alertmanager.yml
    // is not generated: change its group_by and inhibit_rules' equal with it.
    clusterLabel: 'cluster',

    // ---------------------------------------------------------------- runbooks

    // Where each alert's runbook is: %s is the alert's name. The default is the
    // placeholder base of this repository's docs/runbooks/; point it at where your copy
    // is served (kubernetes-mixin's runbookURLPattern, applied once to every alert).
    runbookURLPattern: 'https://git.example.internal/ceph/cephnode-exporter/blob/main/docs/runbooks/%s.md',

    // ---------------------------------------------------------------- evaluation

    // Every group but the laggy-PG ones: a 1-minute resolution for the `for:` durations
    // and the week-old baseline.
    ruleEvaluationInterval: '1m',
    // cephnode.pgs and cephnode.laggy: follow the 30 s scrapes for the laggy-PG alert's
    // 2-minute deadline.
    laggyRuleEvaluationInterval: '30s',

    // ---------------------------------------------------------------- recording rules

    // Minimum ops/s of an OSD and op type for its mean latency (a mean of a few ops is
    // noise that would skew the medians).
    latencyMinOpsPerSecond: 1,
    // Active OSDs of a device class for a fleet median, and of a host for its median.
    fleetMedianMinOSDs: 5,
    hostMedianMinOSDs: 3,
    // An idle state is deep above this exit latency: the cpu.cstates check's
    // max_exit_latency_us default (C2 on EPYC, C6 on Xeon).
    deepIdleExitLatencySeconds: 10e-6,

    // ---------------------------------------------------------------- detuned node

    // Hold of every alert that follows a tuning check (CephNodeDeepCStatesEnabled,
    // CephNodeIOMMUTranslatingNVMe, CephNodeCPUGovernor, CephNodeNVMeScheduler,
    // CephNodePCIeLinkDegraded, CephNodeNetworkMTU, CephNodeNetworkRings,
    // CephNodeSysctlDrift, CephNodeTunedProfile, CephNodeOSDDebugLogging,
    // CephNodeRocksDBUnoptimised, CephNodeTuningCheckFailed).
    detunedCheckFor: '3m',

    // CephNodeDeepCStatesResident: share of CPU time in deep idle states.
    deepCStatesResidencyThreshold: 0.05,
    deepCStatesResidentFor: '10m',

    // CephNodeIOMMUSpinlockContention: share of busy samples spinning on IOMMU locks
    // (warning, critical), judged on windows of at least this many busy samples.
    iommuSpinlockWarningRatio: 0.05,
    iommuSpinlockCriticalRatio: 0.25,
    iommuSpinlockMinSamples: 100,
    iommuSpinlockFor: '5m',

    // ---------------------------------------------------------------- latency

    // CephNodeOSDLatencyOutlier: an OSD's 2-minute mean read or write latency against
    // its device class's median, with a floor in seconds.
    osdLatencyOutlierFactor: 2,
    osdLatencyOutlierMinSeconds: 0.0005,
    osdLatencyOutlierFor: '5m',

    // CephNodeHostLatencyOutlier: the median of a host's OSDs over the class median.
    hostLatencyOutlierRatio: 1.2,
    hostLatencyOutlierFor: '3m',

    // CephNodeLatencyRegression: a host's 30-minute mean p99 against a week ago, with a
    // floor, at no more than this ratio of last week's load.
    latencyRegressionFactor: 1.5,
    latencyRegressionMinSeconds: 0.001,
    latencyRegressionMaxLoadRatio: 1.25,
    latencyRegressionFor: '10m',

    // CephNodeBlueStoreCommitOutlier: an OSD's mean commit latency against its class.
    bluestoreCommitOutlierFactor: 2,
    bluestoreCommitOutlierMinSeconds: 0.001,
    bluestoreCommitOutlierFor: '5m',

    // CephNodeRocksDBLatencyOutlier: an OSD's mean RocksDB get or submit latency
    // against its class; the floor stays below twice a healthy NVMe get (about 10 us).
    rocksdbLatencyOutlierFactor: 2,
    rocksdbLatencyOutlierMinSeconds: 0.00001,
    rocksdbLatencyOutlierFor: '5m',

    // CephNodeSlowOps.
    slowOpsFor: '1m',

    // ---------------------------------------------------------------- laggy PGs

    // CephNodeLaggyPGs: evaluations of the last 3 minutes at which PGs were laggy or
    // waiting in the mgr's last two scrapes (cluster:ceph_pg_laggy_wait:sum_min45s). 2: a
    // sustained stall pages 60-90 s after the mgr's first report, a stall that keeps coming
    // back (one every 90 s) stays paged, and an OSD restart's wait (one scrape) never counts.
    laggyPGsStallEvaluations: 2,
    // CephNodeLaggyPGsAttributed: an OSD is named as a replica of at least
    // laggyPGsAttributionMinShare of the laggy PGs and of laggyPGsAttributionFactor times
    // as many as the median OSD in them (several stalls at once), or (as a host is) of at
    // least laggyPGsAttributionShare of them and of the most (one stall in a small cluster).
    laggyPGsAttributionShare: 0.5,
    laggyPGsAttributionMinShare: 0.2,
    laggyPGsAttributionFactor: 3,
    laggyPGsAttributedFor: '1m',

    // ---------------------------------------------------------------- heartbeat pings

    // CephNodeHeartbeatPingOutlier: an OSD's median heartbeat ping (the larger of its two
    // networks), or the median of a host's OSDs, against the fleet's median (the median of
    // the hosts' medians, from at least this many hosts), and a floor.
    heartbeatFleetMinHosts: 3,
    osdHeartbeatOutlierFactor: 3,
    hostHeartbeatOutlierFactor: 3,
    heartbeatOutlierMinSeconds: 0.005,
    heartbeatOutlierFor: '5m',

    // ---------------------------------------------------------------- fleet drift

    // CephNodeFactDrift and its recording rules (cephnode.drift, cephnode.drift.alerts):
    // facts change at reboots and upgrades, so 5 minutes is fine enough and a fifth of the
    // 1-minute groups' cost.
    driftRuleEvaluationInterval: '5m',
    // A host's value is drift when at most this share of the cluster's OSD hosts have it
    // (1 host from 10 hosts on, 6 of 63) ...
    driftMaxShare: 0.1,
    // ... while at least this share have one other value, the majority.
    driftMinMajorityShare: 0.75,
    // The number of hosts with the host's value unchanged for this long (and the value
    // held an hour ago): a rolling upgrade moves a host at least this often.
    driftSettle: '1h',
    // Hold after that.
    driftFor: '1h',
    // A host's own series are read over this range: a reboot (a few missed scrapes) does
    // not restart the hold.
    driftGap: '15m',
    // tuning_fact_hash facts not compared: serial numbers differ on every host, and the
    // families the rule reads as labels (their value, not a hash, is named).
    driftHashExcluded: 'nvme_controller_info|bios_info|cpu_microcode_info|kernel_release_info|tuned_profile_info|osd_info',

    // ---------------------------------------------------------------- the exporter

    // CephNodeExporterDown: up == 0 for this long (a restart or one slow scrape is not
    // a ticket).
    exporterDownFor: '5m',
    // CephNodeExporterFlapping: at least this many interruptions (restarts, or stretches
    // of failed scrapes) in the window, for this long. One or two rolling restarts in 10
    // minutes stay below 3; a burst of three restarts by hand drops out of the window
    // before the hold ends.
    exporterFlappingWindow: '10m',
    exporterFlappingMinInterruptions: 3,
    exporterFlappingFor: '10m',
    // CephNodeCollectorFailing: every scrape failed for this long (over a 90 s window). A
    // collector failing for good takes its checks' alerts away 90 s later: short.
    collectorFailingFor: '5m',
    // CephNodeOSDSocketUnresponsive: four scrapes.
    osdSocketUnresponsiveFor: '2m',
    // CephNodeOSDHostUnwatched: the mgr reports OSDs of a host up that no exporter
    // reports, for this long (a new node's exporter deployed after its OSDs).
    osdHostUnwatchedFor: '10m',

    // ---------------------------------------------------------------- dashboards

    // Tags, auto-refresh and default time range of both dashboards. The defaults are
    // dashboards/generate.py's, so that the committed JSON is the generator's output
    // unchanged (tests/test_dashboards.py); alerts/README.md, "Monitoring mixin".
    dashboardTags: ['ceph', 'cephnode-exporter'],
    dashboardRefresh: '1m',
    dashboardTimeFrom: 'now-6h',
    dashboardTimeTo: 'now',
    dashboardTimezone: 'browser',

    // ---------------------------------------------------------------- derived

    // Not settings: cephSelector in the two forms the expressions need ('{job="ceph"}'
    // after a bare name, ', job="ceph"' inside existing braces), empty when it is.
    cephSelectorBraces: if self.cephSelector == '' then '' else '{%s}' % self.cephSelector,
    cephSelectorAppend: if self.cephSelector == '' then '' else ', %s' % self.cephSelector,
  },
}
