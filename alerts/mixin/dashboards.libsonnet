// The Grafana dashboards. dashboards/generate.py (Python) builds them and its output is
// committed (dashboards/*.json, kept current by tests/test_dashboards.py); the mixin
// takes that JSON as its input and applies the _config to it: tags, refresh, default
// time range and timezone, and the cluster label in every query. With the default
// _config this changes nothing, and `make mixin` writes the same bytes back. Why the
// dashboards are not jsonnet: alerts/README.md, "Monitoring mixin".
//
// The import is relative to this file: a jsonnet-bundler install of the repository
// (alerts/README.md) keeps dashboards/ beside alerts/.
local text = import 'lib/text.libsonnet';

local boards = {
  'cephnode-fleet.json': import '../../dashboards/cephnode-fleet.json',
  'cephnode-node.json': import '../../dashboards/cephnode-node.json',
};

{
  grafanaDashboards+:: {
    local c = $._config,
    local rename(s) = text.renameLabel(s, 'cluster', c.clusterLabel),
    // Table columns hidden, ordered or renamed by label name (Grafana's organize
    // transformation): the cluster column is plumbing under whatever name it has.
    local renameKeys(o) = {
      [if k == 'cluster' then c.clusterLabel else k]: o[k]
      for k in std.objectFields(o)
    },
    local transformation(t) =
      if t.id == 'organize' then
        t { options: { [k]: renameKeys(t.options[k]) for k in std.objectFields(t.options) } }
      else t,
    local panel(p) =
      p
      + (if std.objectHas(p, 'targets') then
           { targets: [t + (if std.objectHas(t, 'expr') then { expr: rename(t.expr) } else {}) for t in p.targets] }
         else {})
      + (if std.objectHas(p, 'transformations') then
           { transformations: [transformation(t) for t in p.transformations] }
         else {})
      + (if std.objectHas(p, 'panels') then { panels: [panel(q) for q in p.panels] } else {}),
    local variable(v) =
      if v.type != 'query' then v
      else v
           + (if std.isObject(v.query) then { query+: { query: rename(v.query.query) } }
              else { query: rename(v.query) })
           + (if std.objectHas(v, 'definition') then { definition: rename(v.definition) } else {}),

    [name]: boards[name] {
      tags: c.dashboardTags,
      refresh: c.dashboardRefresh,
      time: { from: c.dashboardTimeFrom, to: c.dashboardTimeTo },
      timezone: c.dashboardTimezone,
      panels: [panel(p) for p in super.panels],
      templating+: { list: [variable(v) for v in super.list] },
    }
    for name in std.objectFields(boards)
  },
}
