// Offline validation of bmcfleet's deployment files; run by deploy/validate.sh.
//
//   node validate.mjs k8s RENDERED.yaml [--replicas N]   rendered kustomize output
//   node validate.mjs nats-values VALUES.yaml NATS.conf  NATS Helm chart values
//   node validate.mjs compose COMPOSE.yaml               cross-checks (schema: check-jsonschema)
//
// k8s, for every object:
//   1. schema: the OpenAPI schema of its kind (kubernetes-models for the core
//      API, @kubernetes-models/keda for KEDA's CRDs; types, enums, required);
//   2. strict fields: every field must exist in the kind's definition (the
//      generated type declarations of the same packages), which catches the
//      misspelt optional field a schema without additionalProperties lets by;
//   3. bmcfleet's own rules: probes, resources, hardening, references between
//      objects, PDB/NetworkPolicy selectors, KEDA triggers vs. partitions.
// Exit status 1 with one line per problem; 0 with a summary otherwise.

import { readFileSync, existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments, parse as parseYaml } from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, "node_modules");
const problems = [];
const problem = (where, what) => problems.push(`${where}: ${what}`);

// ---------------------------------------------------------------- kinds

/** apiVersion/kind -> [model module, type-declaration file]. */
function modelPaths(apiVersion, kind) {
  if (apiVersion === "keda.sh/v1alpha1") {
    return [`@kubernetes-models/keda/keda.sh/v1alpha1/${kind}`, join(modules, "@kubernetes-models/keda/keda.sh/v1alpha1", `${kind}.d.ts`)];
  }
  const path = apiVersion.includes("/") ? apiVersion : apiVersion; // "v1" or "group/version"
  return [`kubernetes-models/${path}/${kind}`, join(modules, "kubernetes-models", path, `${kind}.d.ts`)];
}

// ------------------------------------------------- strict field checking

const interfaces = new Map(); // .d.ts path -> { props: Map(name -> type string), imports: Map(id -> path) } | null

/** The first exported interface of a generated .d.ts file (null for type aliases). */
function loadInterface(file) {
  if (interfaces.has(file)) return interfaces.get(file);
  let result = null;
  if (existsSync(file)) {
    const text = readFileSync(file, "utf8");
    const imports = new Map();
    for (const m of text.matchAll(/^import \{ ([^}]+) \} from "([^"]+)";/gm)) {
      const spec = m[2];
      let target;
      if (spec.startsWith(".")) target = resolve(dirname(file), spec.replace(/\.js$/, ".d.ts"));
      else target = join(modules, spec.replace(/\.js$/, "") + ".d.ts");
      for (const id of m[1].split(",").map((s) => s.trim())) imports.set(id, target);
    }
    const start = text.search(/^export interface \w+[^{]*\{$/m);
    if (start >= 0) {
      const props = new Map();
      for (const line of text.slice(start).split("\n").slice(1)) {
        if (line.startsWith("}")) break;
        const p = line.match(/^ {4}"([^"]+)"\??: (.+?);?$/);
        if (p) props.set(p[1], p[2]);
      }
      result = { props, imports };
    }
  }
  interfaces.set(file, result);
  return result;
}

/** Walk `value` against the interface in `file`; report fields it doesn't declare. */
function strictWalk(value, file, where) {
  const iface = loadInterface(file);
  if (!iface || value === null || typeof value !== "object" || Array.isArray(value)) return;
  for (const [key, v] of Object.entries(value)) {
    const type = iface.props.get(key);
    if (type === undefined) {
      problem(where, `unknown field \`${key}\` (not in ${file.split("node_modules/")[1]})`);
      continue;
    }
    const arr = type.match(/^Array<(\w+)>$/);
    const ref = arr ? arr[1] : type.match(/^\w+$/)?.[0];
    const target = ref && iface.imports.get(ref);
    if (!target) continue; // a primitive, literal, map or inline object: nothing declared below
    if (arr && Array.isArray(v)) v.forEach((e, i) => strictWalk(e, target, `${where}.${key}[${i}]`));
    else if (!arr) strictWalk(v, target, `${where}.${key}`);
  }
}

// --------------------------------------------------------- helpers

const matches = (selector, labels) =>
  Object.entries(selector?.matchLabels ?? {}).every(([k, v]) => labels?.[k] === v) &&
  (selector?.matchExpressions ?? []).every((e) => {
    const has = labels && Object.hasOwn(labels, e.key);
    if (e.operator === "In") return has && e.values.includes(labels[e.key]);
    if (e.operator === "NotIn") return !has || !e.values.includes(labels[e.key]);
    if (e.operator === "Exists") return has;
    if (e.operator === "DoesNotExist") return !has;
    return false;
  });

const quantityBytes = (q) => {
  const m = String(q).match(/^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|K|M|G|T)?B?$/);
  if (!m) return NaN;
  const mult = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, K: 1e3, M: 1e6, G: 1e9, T: 1e12 }[m[2]] ?? 1;
  return Number(m[1]) * mult;
};

const seconds = (d) => {
  const m = String(d).match(/^(\d+)(ms|s|m|h)$/);
  return m ? Number(m[1]) * { ms: 0.001, s: 1, m: 60, h: 3600 }[m[2]] : NaN;
};

// ------------------------------------------------------------- k8s

async function validateK8s(file, args) {
  const wantReplicas = args.includes("--replicas") ? args[args.indexOf("--replicas") + 1] : null;
  const docs = parseAllDocuments(readFileSync(file, "utf8"));
  const objects = [];
  for (const d of docs) {
    if (d.errors.length) problem(file, `YAML: ${d.errors[0].message}`);
    const o = d.toJS();
    if (o) objects.push(o);
  }
  if (objects.length === 0) problem(file, "no objects rendered");
  const name = (o) => `${o.kind}/${o.metadata?.name}`;
  const byKind = (k) => objects.filter((o) => o.kind === k);

  // 1 + 2: schema and strict fields.
  for (const o of objects) {
    if (!o.apiVersion || !o.kind) {
      problem(file, "an object without apiVersion/kind");
      continue;
    }
    const [mod, dts] = modelPaths(o.apiVersion, o.kind);
    let Model;
    try {
      Model = (await import(mod))[o.kind];
    } catch {
      problem(name(o), `no schema known for ${o.apiVersion} ${o.kind}`);
      continue;
    }
    // The API server decodes Secret data as Go does (base64, line breaks
    // ignored); kustomize wraps long values, the schema's "byte" format doesn't.
    const checked = o.kind === "Secret" && o.data ? { ...o, data: Object.fromEntries(Object.entries(o.data).map(([k, v]) => [k, String(v).replace(/\n/g, "")])) } : o;
    try {
      new Model(checked).validate();
    } catch (e) {
      problem(name(o), `schema: ${e.message}`);
    }
    strictWalk(o, dts, name(o));
  }

  // 3: bmcfleet's rules.
  const configMaps = new Map(byKind("ConfigMap").map((c) => [c.metadata.name, c]));
  const secrets = new Map(byKind("Secret").map((s) => [s.metadata.name, s]));
  const serviceAccounts = new Set(byKind("ServiceAccount").map((s) => s.metadata.name));
  const deployments = byKind("Deployment");
  const env = {}; // merged BMCFLEET_* of the config maps the workloads use

  for (const d of deployments) {
    const where = name(d);
    const tpl = d.spec?.template ?? {};
    const pod = tpl.spec ?? {};
    if (!matches(d.spec?.selector, tpl.metadata?.labels)) problem(where, "selector does not match the pod template's labels");
    if (pod.serviceAccountName && !serviceAccounts.has(pod.serviceAccountName)) problem(where, `service account ${pod.serviceAccountName} is not defined`);
    if (pod.securityContext?.runAsNonRoot !== true) problem(where, "pod securityContext.runAsNonRoot must be true");
    if (pod.securityContext?.seccompProfile?.type !== "RuntimeDefault") problem(where, "pod seccompProfile must be RuntimeDefault");
    const volumes = new Map((pod.volumes ?? []).map((v) => [v.name, v]));
    for (const v of volumes.values()) {
      if (v.secret && !secrets.has(v.secret.secretName)) problem(where, `volume ${v.name}: Secret ${v.secret.secretName} is not defined`);
      if (v.secret) for (const it of v.secret.items ?? []) if (!secrets.get(v.secret.secretName)?.data?.[it.key]) problem(where, `volume ${v.name}: Secret ${v.secret.secretName} has no key ${it.key}`);
      if (v.configMap && !configMaps.has(v.configMap.name)) problem(where, `volume ${v.name}: ConfigMap ${v.configMap.name} is not defined`);
    }
    for (const c of pod.containers ?? []) {
      const cw = `${where} container ${c.name}`;
      if (!c.image || c.image === "bmcfleet" || c.image.endsWith(":latest") || !/[:@]/.test(c.image)) problem(cw, `image ${c.image} is not pinned to a registry tag or digest`);
      for (const r of ["cpu", "memory"]) if (!c.resources?.requests?.[r]) problem(cw, `resources.requests.${r} missing`);
      if (!c.resources?.limits?.memory) problem(cw, "resources.limits.memory missing");
      const probe = (p, path) => p?.httpGet?.path === path && (c.ports ?? []).some((port) => port.name === p.httpGet.port || port.containerPort === p.httpGet.port);
      if (!probe(c.livenessProbe, "/healthz")) problem(cw, "livenessProbe must GET /healthz on a declared port");
      if (!probe(c.readinessProbe, "/readyz")) problem(cw, "readinessProbe must GET /readyz on a declared port");
      const sc = c.securityContext ?? {};
      if (sc.allowPrivilegeEscalation !== false) problem(cw, "securityContext.allowPrivilegeEscalation must be false");
      if (sc.readOnlyRootFilesystem !== true) problem(cw, "securityContext.readOnlyRootFilesystem must be true");
      if (!(sc.capabilities?.drop ?? []).includes("ALL")) problem(cw, "securityContext.capabilities.drop must include ALL");
      const local = {};
      for (const ef of c.envFrom ?? []) {
        if (ef.configMapRef) {
          const cm = configMaps.get(ef.configMapRef.name);
          if (!cm) problem(cw, `envFrom: ConfigMap ${ef.configMapRef.name} is not defined`);
          else Object.assign(local, cm.data);
        }
        if (ef.secretRef && !secrets.has(ef.secretRef.name)) problem(cw, `envFrom: Secret ${ef.secretRef.name} is not defined`);
      }
      for (const e of c.env ?? []) {
        const ref = e.valueFrom?.secretKeyRef;
        if (ref && !secrets.get(ref.name)?.data?.[ref.key]) problem(cw, `env ${e.name}: Secret ${ref.name} with key ${ref.key} is not defined`);
        const cref = e.valueFrom?.configMapKeyRef;
        if (cref && !configMaps.get(cref.name)?.data?.[cref.key]) problem(cw, `env ${e.name}: ConfigMap ${cref.name} with key ${cref.key} is not defined`);
        if (e.value !== undefined) local[e.name] = e.value;
      }
      for (const [k, v] of Object.entries(local)) if (k.startsWith("BMCFLEET_")) {
        const shared = ["BMCFLEET_PARTITIONS", "BMCFLEET_REPLICAS", "BMCFLEET_STREAM", "BMCFLEET_SUBJECT_PREFIX", "BMCFLEET_NATS_URL"];
        if (shared.includes(k) && env[k] !== undefined && env[k] !== v) problem(cw, `${k}=${v} differs from another component's ${env[k]}: gateway and workers must agree`);
        if (shared.includes(k)) env[k] = v;
      }
      if (c.args?.[0] === "bmc-worker") {
        const creds = local.BMCFLEET_CREDENTIALS_FILE;
        const mount = (c.volumeMounts ?? []).find((m) => creds?.startsWith(m.mountPath + "/"));
        const vol = mount && volumes.get(mount.name);
        const key = creds && mount && creds.slice(mount.mountPath.length + 1);
        if (!creds) problem(cw, "BMCFLEET_CREDENTIALS_FILE is not set");
        else if (!vol?.secret) problem(cw, `BMCFLEET_CREDENTIALS_FILE ${creds} is not on a mounted Secret`);
        else {
          const item = (vol.secret.items ?? []).find((i) => i.path === key);
          const data = secrets.get(vol.secret.secretName)?.data?.[item ? item.key : key];
          if (!data) problem(cw, `Secret ${vol.secret.secretName} provides no ${key}`);
          else {
            try {
              const parsed = JSON.parse(Buffer.from(data, "base64").toString("utf8"));
              for (const [n, e] of Object.entries(parsed)) {
                const keys = Object.keys(e ?? {}).sort().join(",");
                if (keys !== "password,username") problem(cw, `credentials entry ${n}: expected exactly username and password, got ${keys}`);
              }
            } catch (e) {
              problem(cw, `credentials file in Secret ${vol.secret.secretName} is not JSON: ${e.message}`);
            }
          }
        }
        const drain = seconds(local.BMCFLEET_DRAIN_TIMEOUT ?? "30s");
        if (!((pod.terminationGracePeriodSeconds ?? 30) > drain)) problem(where, `terminationGracePeriodSeconds must exceed the drain timeout (${drain}s)`);
        if (!local.BMCFLEET_WORKER_ID && !(c.env ?? []).some((e) => e.name === "BMCFLEET_WORKER_ID")) problem(cw, "BMCFLEET_WORKER_ID should be set (the pod name)");
      }
    }
  }
  if (deployments.length) for (const k of ["BMCFLEET_PARTITIONS", "BMCFLEET_REPLICAS", "BMCFLEET_STREAM"]) if (env[k] === undefined) problem(file, `${k} is not configured for gateway and workers`);
  if (env.BMCFLEET_REPLICAS && !["1", "3", "5"].includes(env.BMCFLEET_REPLICAS)) problem(file, `BMCFLEET_REPLICAS=${env.BMCFLEET_REPLICAS}: use 1, 3 or 5`);
  if (wantReplicas && env.BMCFLEET_REPLICAS !== wantReplicas) problem(file, `BMCFLEET_REPLICAS=${env.BMCFLEET_REPLICAS}, expected ${wantReplicas}`);

  const podsOf = (ns) => deployments.filter((d) => (d.metadata.namespace ?? "") === (ns ?? "")).map((d) => ({ d, labels: d.spec.template.metadata?.labels ?? {} }));
  for (const pdb of byKind("PodDisruptionBudget")) {
    const hit = podsOf(pdb.metadata.namespace).filter((p) => matches(pdb.spec.selector, p.labels));
    if (hit.length !== 1) problem(name(pdb), `selects the pods of ${hit.length} Deployments (expected exactly 1)`);
  }
  for (const np of byKind("NetworkPolicy")) {
    const sel = np.spec.podSelector ?? {};
    const empty = !sel.matchLabels && !sel.matchExpressions;
    if (!empty && !podsOf(np.metadata.namespace).some((p) => matches(sel, p.labels)) && deployments.length) problem(name(np), "selects no pods of this deployment");
  }
  for (const svc of byKind("Service")) {
    if (!podsOf(svc.metadata.namespace).some((p) => matches({ matchLabels: svc.spec.selector }, p.labels))) problem(name(svc), "selects no pods");
  }
  for (const so of byKind("ScaledObject")) {
    const where = name(so);
    const target = deployments.find((d) => d.metadata.name === so.spec.scaleTargetRef?.name);
    if (!target) {
      problem(where, `scale target ${so.spec.scaleTargetRef?.name} is not a Deployment here`);
      continue;
    }
    if (target.spec.replicas !== undefined) problem(name(target), "sets spec.replicas although KEDA scales it (every apply would fight the autoscaler)");
    const partitions = Number(env.BMCFLEET_PARTITIONS);
    // The backlog comes from the gateways' /metrics: partition consumers are
    // renamed at every lease epoch, so no trigger may name one.
    const gatewayServices = byKind("Service").filter((svc) =>
      deployments.some((d) => d.metadata.name !== target.metadata.name && matches({ matchLabels: svc.spec.selector }, d.spec.template.metadata?.labels ?? {})),
    );
    let backlog = 0;
    for (const t of so.spec.triggers ?? []) {
      const m = t.metadata ?? {};
      if (t.type === "nats-jetstream") {
        problem(where, `trigger ${t.name}: nats-jetstream reads a named consumer (${m.consumer}), but partition consumers are renamed at every lease epoch; scale on bmcfleet_jobs_backlog (metrics-api)`);
        continue;
      }
      if (t.type !== "metrics-api") continue;
      if (m.format !== "prometheus") problem(where, `trigger ${t.name}: format ${m.format}, expected prometheus`);
      if (m.valueLocation !== "bmcfleet_jobs_backlog") problem(where, `trigger ${t.name}: valueLocation ${m.valueLocation}, expected bmcfleet_jobs_backlog`);
      if (!m.targetValue) problem(where, `trigger ${t.name}: metadata.targetValue missing`);
      let url;
      try {
        url = new URL(m.url ?? "");
      } catch {
        problem(where, `trigger ${t.name}: url ${m.url} is not a URL`);
        continue;
      }
      const host = url.hostname.split(".")[0];
      const svc = gatewayServices.find((s) => s.metadata.name === host);
      if (!svc) problem(where, `trigger ${t.name}: ${url.hostname} is no Service of the gateway here`);
      else if (!(svc.spec.ports ?? []).some((p) => String(p.port) === (url.port || "80"))) problem(where, `trigger ${t.name}: Service ${host} has no port ${url.port || "80"}`);
      if (url.pathname !== "/metrics") problem(where, `trigger ${t.name}: path ${url.pathname}, expected /metrics`);
      backlog++;
    }
    if (backlog !== 1) problem(where, `${backlog} metrics-api triggers on bmcfleet_jobs_backlog (expected exactly 1)`);
    if (so.spec.maxReplicaCount > partitions) problem(where, `maxReplicaCount ${so.spec.maxReplicaCount} exceeds the partition count ${partitions}: extra workers would own nothing`);
    const formula = so.spec.advanced?.scalingModifiers?.formula;
    if (formula) {
      const named = new Set((so.spec.triggers ?? []).map((t) => t.name));
      const used = new Set(formula.match(/[A-Za-z_]\w*/g) ?? []);
      for (const n of named) if (!used.has(n)) problem(where, `scalingModifiers.formula does not use trigger ${n}`);
      for (const u of used) if (!named.has(u)) problem(where, `scalingModifiers.formula uses ${u}, which is no trigger's name`);
    }
  }
  return `${objects.length} objects`;
}

// ------------------------------------------------------ NATS values

/** A parser for the NATS configuration format subset bmcfleet.conf uses. */
function parseNatsConf(text) {
  const tokens = [];
  const re = /\s+|#[^\n]*|\/\/[^\n]*|"((?:[^"\\]|\\.)*)"|([{}\[\],=:])|([^\s{}\[\],=:#"]+)/gy;
  let m;
  while (re.lastIndex < text.length && (m = re.exec(text))) {
    if (m[1] !== undefined) tokens.push({ s: m[1] });
    else if (m[2] !== undefined) tokens.push({ p: m[2] });
    else if (m[3] !== undefined) tokens.push({ s: m[3], bare: true });
  }
  let i = 0;
  const value = () => {
    const t = tokens[i++];
    if (t.p === "{") return map("}");
    if (t.p === "[") {
      const a = [];
      while (tokens[i].p !== "]") {
        a.push(value());
        if (tokens[i].p === ",") i++;
      }
      i++;
      return a;
    }
    if (t.bare && (t.s === "true" || t.s === "false")) return t.s === "true";
    return t.s;
  };
  const map = (end) => {
    const o = {};
    while (i < tokens.length && tokens[i].p !== end) {
      const key = tokens[i++].s;
      if (tokens[i].p === ":" || tokens[i].p === "=") i++;
      o[key] = value();
      if (tokens[i]?.p === ",") i++;
    }
    i++;
    return o;
  };
  return map("end of file");
}

function validateNatsValues(file, confFile) {
  const v = parseYaml(readFileSync(file, "utf8"));
  const c = v.config ?? {};
  const where = file;
  if (c.cluster?.enabled !== true) problem(where, "config.cluster.enabled must be true");
  if (!(c.cluster?.replicas >= 3 && c.cluster.replicas % 2 === 1)) problem(where, `config.cluster.replicas ${c.cluster?.replicas}: an odd number >= 3 keeps R3 quorum with a node down`);
  if (c.jetstream?.enabled !== true) problem(where, "config.jetstream.enabled must be true");
  const fs = c.jetstream?.fileStore ?? {};
  if (fs.enabled !== true || fs.pvc?.enabled !== true) problem(where, "JetStream must use the file store on a PVC");
  if (!(quantityBytes(fs.maxSize) < quantityBytes(fs.pvc?.size))) problem(where, `fileStore.maxSize (${fs.maxSize}) must be below the PVC size (${fs.pvc?.size})`);
  if (c.jetstream?.memoryStore?.enabled !== false) problem(where, "memoryStore must be disabled (bmcfleet's streams are file-backed)");
  if (c.monitor?.enabled !== true || c.monitor?.port !== 8222) problem(where, "monitoring must be on port 8222 (KEDA's scaler reads it)");
  if (v.podDisruptionBudget?.enabled !== true) problem(where, "podDisruptionBudget.enabled must be true");
  const grace = v.podTemplate?.terminationGracePeriodSeconds ?? 60;
  const need = seconds(c.lameDuckGracePeriod ?? "10s") + seconds(c.lameDuckDuration ?? "30s") + 20;
  if (!(grace >= need)) problem(where, `podTemplate.terminationGracePeriodSeconds ${grace} < lameDuckGracePeriod + lameDuckDuration + 20s (${need})`);
  // Every << $VAR >> comes from the container environment.
  const used = new Set([...JSON.stringify(c.merge ?? {}).matchAll(/<<\s*\$(\w+)\s*>>/g)].map((m) => m[1]));
  for (const u of used) if (!v.container?.env?.[u]) problem(where, `config.merge uses $${u}, which container.env does not set`);
  // Accounts agree with deploy/nats/bmcfleet.conf.
  const conf = parseNatsConf(readFileSync(confFile, "utf8"));
  const norm = (users) =>
    Object.fromEntries(
      (users ?? []).map((u) => [
        u.user,
        JSON.stringify({
          pa: [...(u.permissions?.publish?.allow ?? [])].sort(),
          pd: [...(u.permissions?.publish?.deny ?? [])].sort(),
          sa: [...(u.permissions?.subscribe?.allow ?? [])].sort(),
          sd: [...(u.permissions?.subscribe?.deny ?? [])].sort(),
          r: u.permissions?.allow_responses ?? false,
        }),
      ]),
    );
  const accounts = c.merge?.accounts ?? {};
  if (Object.keys(conf.accounts ?? {}).length === 0) problem(confFile, "no accounts parsed");
  for (const [acc, def] of Object.entries(conf.accounts ?? {})) {
    const a = norm(def.users);
    const b = norm(accounts[acc]?.users);
    for (const u of new Set([...Object.keys(a), ...Object.keys(b)])) {
      if (a[u] !== b[u]) problem(where, `account ${acc} user ${u}: permissions differ from ${confFile} (${a[u] ?? "absent"} vs ${b[u] ?? "absent"})`);
    }
    if ((def.jetstream ?? "") !== (accounts[acc]?.jetstream ?? "")) problem(where, `account ${acc}: jetstream setting differs from ${confFile}`);
    // Exports and imports decide what tenants reach: they must agree too.
    for (const side of ["exports", "imports"]) {
      // Key order and number-vs-string spellings aside.
      const deep = (v) =>
        Array.isArray(v) ? v.map(deep) : v && typeof v === "object" ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, deep(v[k])])) : String(v);
      const canon = (list) => JSON.stringify((list ?? []).map((e) => JSON.stringify(deep(e))).sort());
      if (canon(def[side]) !== canon(accounts[acc]?.[side])) problem(where, `account ${acc}: ${side} differ from ${confFile}`);
    }
  }
  for (const acc of Object.keys(accounts)) if (!(acc in (conf.accounts ?? {}))) problem(where, `account ${acc} is not in ${confFile}`);
  if (conf.system_account !== c.merge?.system_account) problem(where, `system_account differs from ${confFile}`);
  return `${Object.keys(accounts).length} accounts in step with ${confFile.split("/").slice(-2).join("/")}`;
}

// --------------------------------------------------------- compose

function validateCompose(file) {
  const base = dirname(file);
  const c = parseYaml(readFileSync(file, "utf8"), { merge: true });
  const services = c.services ?? {};
  const names = new Set(Object.keys(services));
  const envOf = (s) => (Array.isArray(s.environment) ? Object.fromEntries(s.environment.map((e) => e.split("="))) : s.environment ?? {});
  const topology = {};
  for (const [n, s] of Object.entries(services)) {
    const where = `${file} service ${n}`;
    const ctx = typeof s.build === "string" ? s.build : s.build?.context;
    if (ctx) {
      const dir = resolve(base, ctx);
      if (!existsSync(dir)) problem(where, `build context ${ctx} does not exist`);
      const df = resolve(dir, s.build?.dockerfile ?? "Dockerfile");
      if (!existsSync(df)) problem(where, `Dockerfile ${df} does not exist`);
    }
    for (const vol of s.volumes ?? []) {
      const src = typeof vol === "string" ? vol.split(":")[0] : vol.source;
      if (src?.startsWith(".") && !existsSync(resolve(base, src))) problem(where, `volume source ${src} does not exist`);
    }
    const deps = Array.isArray(s.depends_on) ? s.depends_on : Object.keys(s.depends_on ?? {});
    for (const d of deps) if (!names.has(d)) problem(where, `depends on unknown service ${d}`);
    const env = envOf(s);
    for (const k of ["BMCFLEET_PARTITIONS", "BMCFLEET_REPLICAS", "BMCFLEET_NATS_URL", "BMCFLEET_STREAM"]) {
      if (env[k] === undefined || n === "bmcctl") continue;
      if (topology[k] !== undefined && topology[k] !== env[k]) problem(where, `${k}=${env[k]} differs from another service's ${topology[k]}`);
      topology[k] = env[k];
    }
    for (const k of ["BMCFLEET_NATS_URL", "OTEL_EXPORTER_OTLP_ENDPOINT"]) {
      const host = env[k] && new URL(env[k]).hostname;
      if (host && !names.has(host)) problem(where, `${k} points at ${host}, which is no service`);
    }
    if (env.BMCFLEET_SIM_ENDPOINT) {
      const [ip] = env.BMCFLEET_SIM_ENDPOINT.split(":");
      const sim = Object.values(services).find((x) => Object.values(x.networks ?? {}).some((net) => net?.ipv4_address === ip));
      if (!sim) problem(where, `BMCFLEET_SIM_ENDPOINT ${env.BMCFLEET_SIM_ENDPOINT}: no service has that fixed address`);
    }
  }
  // Grafana gets the dashboard maintained in deploy/grafana/ where its provisioning looks.
  const grafana = services.grafana;
  const dash = (grafana?.volumes ?? []).map((v) => v.split(":")).find(([src]) => src === "./grafana/bmcfleet.json");
  if (!dash) problem(file, "grafana does not mount ./grafana/bmcfleet.json");
  else {
    const prov = parseYaml(readFileSync(resolve(base, "compose/grafana/provisioning/dashboards/bmcfleet.yaml"), "utf8"));
    const path = prov.providers?.[0]?.options?.path;
    if (!dash[1].startsWith(path + "/")) problem(file, `dashboard mounted at ${dash[1]} but provisioning reads ${path}`);
    if (existsSync(resolve(base, "grafana/bmcfleet.json"))) JSON.parse(readFileSync(resolve(base, "grafana/bmcfleet.json"), "utf8"));
  }
  // Prometheus scrapes services that exist, on the metrics port.
  const prom = parseYaml(readFileSync(resolve(base, "compose/prometheus.yml"), "utf8"));
  for (const job of prom.scrape_configs ?? []) {
    for (const t of (job.static_configs ?? []).flatMap((s) => s.targets)) if (!names.has(t.split(":")[0])) problem(file, `prometheus job ${job.job_name}: target ${t} is no service`);
    for (const n of (job.dns_sd_configs ?? []).flatMap((s) => s.names)) if (!names.has(n)) problem(file, `prometheus job ${job.job_name}: ${n} is no service`);
  }
  parseYaml(readFileSync(resolve(base, "compose/otel-collector.yaml"), "utf8"));
  // Example batches parse and name BMCs that are services (or the simulated fleet).
  for (const ex of ["redfish-power-on.json", "ipmi-power-cycle.json", "sim-boot-pxe.json"]) {
    const b = JSON.parse(readFileSync(resolve(base, "compose/examples", ex), "utf8"));
    const host = String(b.bmc?.address ?? "").split(":")[0];
    if (b.bmc?.protocol !== "sim" && !names.has(host)) problem(`compose/examples/${ex}`, `BMC ${host} is no service`);
    if (b.bmc?.credentials?.ref) {
      const creds = JSON.parse(readFileSync(resolve(base, "compose/bmcfleet/credentials.json"), "utf8"));
      if (!creds[b.bmc.credentials.ref]) problem(`compose/examples/${ex}`, `credential ${b.bmc.credentials.ref} is not in compose/bmcfleet/credentials.json`);
    }
  }
  return `${names.size} services`;
}

// ------------------------------------------------------------- main

const [cmd, ...args] = process.argv.slice(2);
let summary;
try {
  if (cmd === "k8s") summary = await validateK8s(args[0], args.slice(1));
  else if (cmd === "nats-values") summary = validateNatsValues(args[0], args[1]);
  else if (cmd === "compose") summary = validateCompose(args[0]);
  else {
    console.error("usage: validate.mjs k8s FILE [--replicas N] | nats-values VALUES CONF | compose FILE");
    process.exit(2);
  }
} catch (e) {
  problem(cmd, `validator error: ${e.stack ?? e}`);
}
if (problems.length) {
  for (const p of problems) console.error(`  ${p}`);
  process.exit(1);
}
console.log(`  ok: ${summary}`);
