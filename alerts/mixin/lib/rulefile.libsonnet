// A Prometheus rule file as YAML text, laid out as people write them: the keys of a rule
// in the order of Prometheus' documentation ("Recording rules", "Alerting rules": record
// or alert, expr, for, labels, annotations), multi-line expressions as literal blocks.
// std.manifestYamlDoc of jsonnet 0.18 sorts every object's keys (a recording rule would
// start with `expr:`) and quotes them; this keeps the generated files readable and
// diffable. Plain jsonnet, no library.
local set(chars) = { [c]: true for c in std.stringChars(chars) };
local letters = set('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ');
local plainChars = set('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:/-');
local digits = set('0123456789');
local durationChars = set('0123456789smhdwy');
local reserved = ['true', 'false', 'yes', 'no', 'on', 'off', 'null', 'y', 'n'];

// A Prometheus duration ('30s', '1h30m'): digits and unit letters, ending in a unit. No
// `e`, so YAML 1.2 cannot read it as a number.
local isDuration(chars) =
  std.length(chars) > 1
  && std.objectHas(digits, chars[0])
  && !std.objectHas(digits, chars[std.length(chars) - 1])
  && std.length([c for c in chars if !std.objectHas(durationChars, c)]) == 0;

// A scalar on one line: plain where YAML reads it back as the same string (it starts with
// a letter, holds no character YAML treats specially, and is no boolean or null; or it is
// a duration), else a double-quoted JSON string, which is valid YAML.
local scalar(s) =
  local str = std.toString(s);
  local chars = std.stringChars(str);
  if std.length(std.split(str, ' ')) > 1 then std.escapeStringJson(str)
  else if std.length(str) > 0
          && std.objectHas(letters, chars[0])
          && std.length([c for c in chars if !std.objectHas(plainChars, c)]) == 0
          && !std.member(reserved, std.asciiLower(str))
  then str
  else if isDuration(chars) then str
  else std.escapeStringJson(str);

// A long one-line string (a description) as a folded block (`>-`), wrapped at about
// 100 columns as people write them: YAML joins the lines with one space, so only a
// string without line breaks, tabs, doubled, leading or trailing spaces is folded.
local wrap(words, width) =
  local step(acc, w) =
    if acc.cur == '' then acc { cur: w }
    else if std.length(acc.cur) + 1 + std.length(w) <= width then acc { cur: acc.cur + ' ' + w }
    else { lines: acc.lines + [acc.cur], cur: w };
  local done = std.foldl(step, words, { lines: [], cur: '' });
  done.lines + [done.cur];

local folded(str, indent) =
  local words = std.split(str, ' ');
  local width = 100 - indent - 2;
  local foldable =
    std.length(str) + indent > 90
    && std.length(words) > 1
    && std.length([w for w in words if w == '']) == 0
    && std.length(std.split(str, '\t')) == 1
    && std.length(std.split(str, '\n')) == 1;
  if foldable then
    local pad = std.repeat(' ', indent + 2);
    '>-\n' + std.join('\n', [pad + l for l in wrap(words, width)])
  else null;

// A value after `key:` at `indent` spaces: a multi-line string is a literal block (`|`
// keeps its one final newline, `|-` none); anything a block cannot hold exactly (trailing
// spaces, a leading space or blank line, several final newlines) is a quoted string.
// Written with std.split only: std.member and std.rstripChars on strings are slow in
// jsonnet 0.18's standard library.
local value(s, indent) =
  local str = std.toString(s);
  local all = std.split(str, '\n');
  local n = std.length(all);
  local final = n > 1 && all[n - 1] == '';
  local lines = if final then [all[i] for i in std.range(0, n - 2)] else all;
  local m = std.length(lines);
  local blockable =
    n > 1
    && lines[0] != '' && lines[m - 1] != ''
    && std.substr(lines[0], 0, 1) != ' '
    && std.length([l for l in lines if std.endsWith(l, ' ')]) == 0;
  local fold = if n == 1 then folded(str, indent) else null;
  if blockable then
    local pad = std.repeat(' ', indent + 2);
    (if final then '|' else '|-') + '\n' + std.join('\n', [if l == '' then '' else pad + l for l in lines])
  else if fold != null then fold
  else scalar(str);

// C++ jsonnet evaluates an object's field again on every access (go-jsonnet caches it),
// and a rule's fields are formatted strings: each object is read once into an array of
// [key, value] pairs (array elements are evaluated once), and the rest works on those.
local pairs(obj) = [[k, obj[k]] for k in std.objectFields(obj)];

local mapping(kvs, order, indent, others=true) =
  local keys = [k[0] for k in kvs];
  local pick(key) = [kv for kv in kvs if kv[0] == key][0];
  local chosen = [pick(k) for k in order if std.member(keys, k)]
                 + (if others then [kv for kv in kvs if !std.member(order, kv[0])] else []);
  [std.repeat(' ', indent) + kv[0] + ': ' + value(kv[1], indent) for kv in chosen];

local submapping(key, kvs, order, indent) =
  if std.length(kvs) == 0 then []
  else [std.repeat(' ', indent) + key + ':'] + mapping(kvs, order, indent + 2);

local ruleKeys = ['alert', 'record', 'expr', 'for', 'keep_firing_for', 'labels', 'annotations'];

local rule(r) =
  local kvs = pairs(r);
  local keys = [kv[0] for kv in kvs];
  local first = if std.member(keys, 'alert') then 'alert' else 'record';
  local sub(key) = local found = [kv[1] for kv in kvs if kv[0] == key]; if std.length(found) == 0 then [] else pairs(found[0]);
  local head = mapping(kvs, [first, 'expr', 'for', 'keep_firing_for'], 8, others=false);
  local rest = submapping('labels', sub('labels'), ['severity'], 8)
               + submapping('annotations', sub('annotations'), ['summary', 'description', 'runbook_url'], 8);
  local unknown = [k for k in keys if !std.member(ruleKeys, k)];
  assert std.length(unknown) == 0 : 'rule %s: unexpected keys %s' % [head[0], unknown];
  ['      - ' + std.lstripChars(head[0], ' ')] + head[1:] + rest;

local group(g) =
  local rules = g.rules;
  ['  - name: ' + scalar(g.name)]
  + (if std.objectHas(g, 'interval') then ['    interval: ' + scalar(g.interval)] else [])
  + (if std.objectHas(g, 'limit') then ['    limit: ' + std.toString(g.limit)] else [])
  + (if std.length(rules) == 0 then ['    rules: []']
     else ['    rules:'] + std.flattenArrays([rule(r) for r in rules]));

{
  // header: comment lines (without '# '), put at the top of the file.
  manifest(rules, header=[])::
    local groups = rules.groups;
    std.join('\n', [if l == '' then '#' else '# ' + l for l in header]
                   + ['groups:']
                   + std.flattenArrays([
                     (if i > 0 then [''] else []) + group(groups[i])
                     for i in std.range(0, std.length(groups) - 1)
                   ])) + '\n',
}
