# systemd unit files for the simulator's systemctl: reads a unit's fragment and its
# drop-ins (the files given, in the order systemd applies them) with systemd's rules -
# sections, continuation lines, later assignments win, an empty assignment resets a
# list, resource limits as soft:hard with byte suffixes and "infinity", command lines
# with systemd's quoting, $VAR/${VAR} from Environment=/EnvironmentFile=, $$ and
# %-specifiers - and prints either
#   mode=dump   what systemctl itself needs, one TAB-separated record per line:
#               type, remain, desc, defdeps, install, exec KEY IGNORE ARGS (ARGS joined
#               by \037), env NAME=VALUE, cond NAME TRIGGER NEGATE ARG, assert ...,
#               wants/requires/after/before/wantedby/requiredby/alias/also UNIT
#   mode=show   `systemctl show` properties (Name=Value), given the runtime state in
#               -v variables: unit, active, sub, result, load, filestate, fragment,
#               dropins, reload (NeedDaemonReload), prefix (stripped from paths),
#               nproc (the host's task limit)
# Variables: unit (the unit's name), root_prefix (where the files were read from).
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }

function is_list(key) {
  return key ~ /^(Wants|Requires|Requisite|BindsTo|PartOf|Upholds|Conflicts|Before|After|OnFailure|OnSuccess|WantedBy|RequiredBy|UpheldBy|Alias|Also|Documentation)$/
}

function assign(key, val,   n, i, w) {
  if (key ~ /^Exec(StartPre|Start|StartPost|Reload|Stop|StopPost|Condition)$/) {
    if (val == "") { nexec[key] = 0; return }
    nexec[key]++; execs[key, nexec[key]] = val; return
  }
  if (key == "Environment") {
    if (val == "") { nenv = 0; return }
    n = tokenize(val, 0)
    for (i = 1; i <= n; i++) if (index(tok[i], "=") > 1) envs[++nenv] = tok[i]
    return
  }
  if (key == "EnvironmentFile") {
    if (val == "") { nenvfile = 0; return }
    envfiles[++nenvfile] = val; return
  }
  if (key ~ /^(Condition|Assert)/) {
    if (val == "") { for (i = 1; i <= ncond; i++) if (condk[i] == key) condk[i] = ""; return }
    ncond++; condk[ncond] = key; condv[ncond] = val; return
  }
  if (section == "Install") seen_install = 1
  if (is_list(key)) {
    if (val == "") { nlist[key] = 0; return }
    n = split(val, w, /[ \t]+/)
    for (i = 1; i <= n; i++) if (w[i] != "") { nlist[key]++; lists[key, nlist[key]] = w[i] }
    return
  }
  single[key] = val
  has[key] = 1
}

# systemd's word splitting: whitespace separates, "..." and '...' quote, a backslash
# escapes (C escapes outside single quotes). Fills tok[1..n]; returns n.
function tokenize(s,   n, i, c, cur, inword, q, nx) {
  n = 0; cur = ""; inword = 0; q = ""
  for (i = 1; i <= length(s); i++) {
    c = substr(s, i, 1)
    if (q == "'") { if (c == "'") q = ""; else cur = cur c; continue }
    if (c == "\\") {
      i++; nx = substr(s, i, 1)
      if (nx == "n") nx = "\n"; else if (nx == "t") nx = "\t"
      cur = cur nx; inword = 1; continue
    }
    if (q == "\"") { if (c == "\"") q = ""; else cur = cur c; continue }
    if (c == "\"" || c == "'") { q = c; inword = 1; continue }
    if (c == " " || c == "\t") { if (inword) { tok[++n] = cur; cur = ""; inword = 0 }; continue }
    cur = cur c; inword = 1
  }
  if (inword) tok[++n] = cur
  return n
}

function specifiers(s,   out, i, c, nx, name) {
  if (index(s, "%") == 0) return s
  name = unit; sub(/\.[^.]*$/, "", name)
  out = ""
  for (i = 1; i <= length(s); i++) {
    c = substr(s, i, 1)
    if (c != "%") { out = out c; continue }
    i++; nx = substr(s, i, 1)
    if (nx == "n") out = out unit
    else if (nx == "N" || nx == "p") { c = name; if (nx == "p") sub(/@.*$/, "", c); out = out c }
    else if (nx == "i") { c = name; if (index(c, "@")) c = substr(c, index(c, "@") + 1); else c = ""; out = out c }
    else if (nx == "t") out = out "/run"
    else if (nx == "h") out = out "/root"
    else if (nx == "%") out = out "%"
    else out = out "%" nx
  }
  return out
}

# $$ is a dollar, ${NAME} the variable, a word that is just $NAME becomes the variable's
# words; fills args[1..] from tok[] and returns the count.
function expand(n, noenv,   i, j, m, t, out, c, name, rest, parts) {
  m = 0
  for (i = 1; i <= n; i++) {
    t = specifiers(tok[i])
    if (!noenv && t ~ /^\$[A-Za-z_][A-Za-z0-9_]*$/) {
      name = substr(t, 2)
      if (name in envval) {
        j = split(envval[name], parts, /[ \t]+/)
        for (c = 1; c <= j; c++) if (parts[c] != "") args[++m] = parts[c]
      }
      continue
    }
    out = ""
    while ((j = index(t, "$")) > 0) {
      out = out substr(t, 1, j - 1)
      rest = substr(t, j + 1)
      if (substr(rest, 1, 1) == "$") { out = out "$"; t = substr(rest, 2); continue }
      if (!noenv && substr(rest, 1, 1) == "{" && index(rest, "}") > 0) {
        name = substr(rest, 2, index(rest, "}") - 2)
        if (name in envval) out = out envval[name]
        t = substr(rest, index(rest, "}") + 1); continue
      }
      out = out "$"; t = rest
    }
    args[++m] = out t
  }
  return m
}

function load_envfiles(   i, path, optional, line, k, v) {
  for (i = 1; i <= nenvfile; i++) {
    path = envfiles[i]; optional = 0
    if (substr(path, 1, 1) == "-") { optional = 1; path = substr(path, 2) }
    while ((getline line < path) > 0) {
      line = trim(line)
      if (line == "" || line ~ /^[#;]/ || index(line, "=") < 2) continue
      k = trim(substr(line, 1, index(line, "=") - 1)); v = trim(substr(line, index(line, "=") + 1))
      if (v ~ /^".*"$/ || v ~ /^'.*'$/) v = substr(v, 2, length(v) - 2)
      sub(/^export[ \t]+/, "", k)
      envval[k] = v; envorder[++nenvorder] = k
    }
    close(path)
  }
}

function bytes(v,   n, u, m) {
  if (v == "infinity") return v
  if (!match(v, /^[0-9.]+/)) return v
  n = substr(v, 1, RLENGTH) + 0; u = toupper(substr(v, RLENGTH + 1))
  m = 1
  if (u == "K") m = 1024; else if (u == "M") m = 1048576; else if (u == "G") m = 1073741824
  else if (u == "T") m = 1099511627776; else if (u == "P") m = 1125899906842624
  else if (u == "E") m = 1152921504606846976
  else if (u != "" && u != "B") return v
  return sprintf("%.0f", n * m)
}

function seconds(v,   n, u) {
  if (v == "infinity") return v
  if (!match(v, /^[0-9.]+/)) return v
  n = substr(v, 1, RLENGTH) + 0; u = substr(v, RLENGTH + 1)
  if (u == "min" || u == "m") n *= 60; else if (u == "h") n *= 3600; else if (u == "d") n *= 86400
  return sprintf("%.0f", n)
}

function limit(name, defsoft, defhard, kind,   raw, soft, hard) {
  soft = defsoft; hard = defhard
  if (("Limit" name) in has && single["Limit" name] != "") {
    raw = single["Limit" name]
    if (index(raw, ":")) { soft = substr(raw, 1, index(raw, ":") - 1); hard = substr(raw, index(raw, ":") + 1) }
    else { soft = raw; hard = raw }
    if (kind == "bytes") { soft = bytes(soft); hard = bytes(hard) }
    else if (kind == "time") { soft = seconds(soft); hard = seconds(hard) }
  }
  if (want_prop("Limit" name)) print "Limit" name "=" hard
  if (want_prop("Limit" name "Soft")) print "Limit" name "Soft=" soft
}

function want_prop(name) { return props == "" || index("," props ",", "," name ",") > 0 }

function prop(name, value) { if (want_prop(name)) print name "=" value }

function list_of(key,   i, out) {
  out = ""
  for (i = 1; i <= nlist[key]; i++) out = out (out == "" ? "" : " ") lists[key, i]
  return out
}

function value_of(key, def) { return (key in has) ? single[key] : def }

function exec_show(key,   i, n, raw, ignore, argv, path, j) {
  for (i = 1; i <= nexec[key]; i++) {
    raw = execs[key, i]; ignore = "no"
    while (raw ~ /^[-@:+!]/) { if (substr(raw, 1, 1) == "-") ignore = "yes"; raw = substr(raw, 2) }
    n = tokenize(raw, 0); argv = ""
    for (j = 1; j <= n; j++) argv = argv (j > 1 ? " " : "") tok[j]
    path = tok[1]
    if (want_prop(key))
      print key "={ path=" path " ; argv[]=" argv " ; ignore_errors=" ignore " ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }"
  }
}

FNR == 1 { section = ""; cont = "" }
{
  line = $0
  if (cont != "") {
    if (line ~ /^[ \t]*[#;]/) next
    line = cont line; cont = ""
  }
  if (line ~ /\\$/) { cont = substr(line, 1, length(line) - 1) " "; next }
  line = trim(line)
  if (line == "" || line ~ /^[#;]/) next
  if (line ~ /^\[.*\]$/) { section = substr(line, 2, length(line) - 2); next }
  eq = index(line, "=")
  if (eq < 2) next
  assign(trim(substr(line, 1, eq - 1)), trim(substr(line, eq + 1)))
}

END {
  for (i = 1; i <= nenv; i++) {
    k = substr(envs[i], 1, index(envs[i], "=") - 1)
    envval[k] = substr(envs[i], index(envs[i], "=") + 1); envorder[++nenvorder] = k
  }
  load_envfiles()
  type = value_of("Type", ("ExecStart" in nexec && nexec["ExecStart"] > 0) ? "simple" : "oneshot")
  if (unit !~ /\.service$/) type = ""
  if (mode == "dump") {
    print "type\t" type
    print "remain\t" value_of("RemainAfterExit", "no")
    print "desc\t" value_of("Description", unit)
    print "defdeps\t" value_of("DefaultDependencies", "yes")
    print "install\t" (seen_install ? 1 : 0)
    for (i = 1; i <= nenvorder; i++) if (!(envorder[i] in done_env)) { done_env[envorder[i]] = 1; print "env\t" envorder[i] "=" envval[envorder[i]] }
    split("ExecCondition ExecStartPre ExecStart ExecStartPost ExecReload ExecStop ExecStopPost", keys, " ")
    for (k = 1; k <= 7; k++) {
      key = keys[k]
      for (i = 1; i <= nexec[key]; i++) {
        raw = execs[key, i]; ignore = 0; noenv = 0
        while (raw ~ /^[-@:+!]/) { c = substr(raw, 1, 1); if (c == "-") ignore = 1; if (c == ":") noenv = 1; raw = substr(raw, 2) }
        n = expand(tokenize(raw, 0), noenv)
        out = ""
        for (j = 1; j <= n; j++) out = out (j > 1 ? "\037" : "") args[j]
        print "exec\t" key "\t" ignore "\t" out
      }
    }
    for (i = 1; i <= ncond; i++) {
      if (condk[i] == "") continue
      v = condv[i]; trigger = 0; negate = 0
      if (substr(v, 1, 1) == "|") { trigger = 1; v = trim(substr(v, 2)) }
      if (substr(v, 1, 1) == "!") { negate = 1; v = trim(substr(v, 2)) }
      kind = (condk[i] ~ /^Assert/) ? "assert" : "cond"
      name = condk[i]; sub(/^(Condition|Assert)/, "", name)
      print kind "\t" name "\t" trigger "\t" negate "\t" specifiers(v)
    }
    split("Wants:wants Requires:requires Requisite:requires BindsTo:requires Upholds:wants After:after Before:before WantedBy:wantedby RequiredBy:requiredby Alias:alias Also:also", pairs, " ")
    for (p = 1; p <= 11; p++) {
      split(pairs[p], kv, ":")
      for (i = 1; i <= nlist[kv[1]]; i++) print kv[2] "\t" lists[kv[1], i]
    }
    exit
  }
  # mode == "show": service properties first, then the unit's, as systemd orders them.
  if (type != "") {
    prop("Type", type)
    prop("Restart", value_of("Restart", "no"))
    prop("RemainAfterExit", value_of("RemainAfterExit", "no"))
    prop("MainPID", 0)
    prop("Result", result)
    for (k = 1; k <= 7; k++) {
      split("ExecCondition ExecStartPre ExecStart ExecStartPost ExecReload ExecStop ExecStopPost", keys, " ")
      exec_show(keys[k])
    }
    prop("WorkingDirectory", value_of("WorkingDirectory", "!/"))
    prop("User", value_of("User", ""))
    prop("Group", value_of("Group", ""))
    env = ""
    for (i = 1; i <= nenv; i++) env = env (env == "" ? "" : " ") (envs[i] ~ /[ \t]/ ? "\"" envs[i] "\"" : envs[i])
    prop("Environment", env)
    files = ""
    for (i = 1; i <= nenvfile; i++) { f = envfiles[i]; o = (substr(f, 1, 1) == "-") ? " (ignore_errors=yes)" : " (ignore_errors=no)"; sub(/^-/, "", f); files = files (files == "" ? "" : " ") f o }
    prop("EnvironmentFiles", files)
    limit("CPU", "infinity", "infinity", "time")
    limit("FSIZE", "infinity", "infinity", "bytes")
    limit("DATA", "infinity", "infinity", "bytes")
    limit("STACK", "8388608", "infinity", "bytes")
    limit("CORE", "0", "infinity", "bytes")
    limit("RSS", "infinity", "infinity", "bytes")
    limit("NOFILE", "1024", "524288", "count")
    limit("AS", "infinity", "infinity", "bytes")
    limit("NPROC", nproc, nproc, "count")
    limit("MEMLOCK", "8388608", "8388608", "bytes")
    limit("LOCKS", "infinity", "infinity", "count")
    limit("SIGPENDING", nproc, nproc, "count")
    limit("MSGQUEUE", "819200", "819200", "bytes")
    limit("NICE", "0", "0", "count")
    limit("RTPRIO", "0", "0", "count")
    limit("RTTIME", "infinity", "infinity", "count")
    prop("TasksMax", value_of("TasksMax", "infinity"))
    prop("OOMScoreAdjust", value_of("OOMScoreAdjust", "0"))
    prop("KillMode", value_of("KillMode", "control-group"))
    prop("Delegate", value_of("Delegate", "no"))
  }
  prop("Id", unit)
  prop("Names", unit)
  for (p = 1; p <= split("Requires Requisite Wants BindsTo PartOf Upholds Conflicts Before After OnFailure OnSuccess Documentation", pk, " "); p++)
    prop(pk[p], list_of(pk[p]))
  prop("Description", value_of("Description", unit))
  prop("LoadState", load)
  prop("ActiveState", active)
  prop("SubState", sub_state)
  prop("FragmentPath", fragment)
  prop("DropInPaths", dropins)
  prop("UnitFileState", filestate)
  prop("NeedDaemonReload", reload)
  prop("DefaultDependencies", value_of("DefaultDependencies", "yes"))
  for (k in has) {
    if (k ~ /^(Type|Restart|RemainAfterExit|WorkingDirectory|User|Group|TasksMax|OOMScoreAdjust|KillMode|Delegate|Description|DefaultDependencies)$/ || k ~ /^Limit/) continue
    if (props != "" && want_prop(k)) print k "=" single[k]
  }
}
