// String helpers of the mixin. Plain jsonnet (std only), so that Debian 12's jsonnet
// 0.18 builds it without fetching a library.
{
  // YAML's folded style (`>-`) as jsonnet: the lines of a text block joined by one space,
  // without the final newline. Descriptions are written as text blocks for reading and
  // manifested as the one line Alertmanager shows.
  fold(s)::
    std.join(' ', std.split(std.rstripChars(s, '\n'), '\n')),

  // A Prometheus duration in words for a description: '5m' -> '5 minutes', '1h' ->
  // '1 hour'. Anything else (a compound '1h30m') is returned as written.
  duration(d)::
    local units = { s: 'second', m: 'minute', h: 'hour', d: 'day', w: 'week' };
    local unit = std.substr(d, std.length(d) - 1, 1);
    local num = std.substr(d, 0, std.length(d) - 1);
    local digits = std.length(num) > 0
                   && std.length([c for c in std.stringChars(num) if !std.member('0123456789', c)]) == 0;
    if std.objectHas(units, unit) && digits then
      num + ' ' + units[unit] + (if num == '1' then '' else 's')
    else d,

  // Rename a label in a PromQL expression: every `from` that stands alone as a name
  // (not part of a longer name or a recording rule's level, not a Grafana `$variable`)
  // becomes `to`. PromQL has no string escapes that could hold a bare label name, so a
  // token scan is enough for the dashboards' queries, which are generated (no regex in
  // jsonnet's standard library).
  renameLabel(expr, from, to)::
    if from == to then expr else
      local isName(c) = std.member('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_', c);
      local n = std.length(from);
      local hits = [
        i
        for i in std.findSubstr(from, expr)
        if (i == 0 || !(isName(expr[i - 1]) || expr[i - 1] == '$' || expr[i - 1] == ':'))
           && (i + n == std.length(expr) || !(isName(expr[i + n]) || expr[i + n] == ':'))
      ];
      local starts = [0] + [i + n for i in hits];
      local ends = hits + [std.length(expr)];
      std.join(to, [std.substr(expr, starts[k], ends[k] - starts[k]) for k in std.range(0, std.length(starts) - 1)]),
}
