//! The files in deploy/ checked against the binary they deploy, offline: every flag they pass
//! exists in `f5 serve --help` / `f5 batch --help`; the probes and the balancer's health check
//! name routes a running server answers without a token; the autoscaler's metric is one that
//! /metrics reports; the grace period covers the drain; the batch Job's shard count matches its
//! completions.

use std::collections::BTreeSet;
use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use yaml_rust2::{Yaml, YamlLoader};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A server that is stopped when the test ends, passed or failed (a failed assertion must not
/// leave it running, holding the test's output open).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The seconds `f5 serve` may take after the drain time to write its 503s (the server's
/// CUT_OFF_GRACE); the grace period must cover it too.
const SERVER_CUT_OFF_GRACE_S: i64 = 2;

/// Every `--flag` a command's help lists.
fn help_flags(command: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_f5")).args([command, "--help"]).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .filter(|t| t.starts_with("--") && t.len() > 2)
        .map(|t| t.split(['=', '<']).next().unwrap_or(t).to_string())
        .collect()
}

/// The flags among `args`, each checked to be one the command has.
fn check_flags(what: &str, args: &[String], known: &BTreeSet<String>) {
    let flags: Vec<&String> = args.iter().filter(|a| a.starts_with("--")).collect();
    assert!(!flags.is_empty(), "{what}: no flags found in {args:?}");
    for flag in flags {
        let name = flag.split('=').next().unwrap_or(flag);
        assert!(known.contains(name), "{what}: {name} is not a flag of f5 (known: {known:?})");
    }
}

/// The value after `flag` in an argument list.
fn arg_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).map(String::as_str)
}

fn strings(y: &Yaml) -> Vec<String> {
    y.as_vec()
        .unwrap_or_else(|| panic!("a list, got {y:?}"))
        .iter()
        .map(|v| match v {
            Yaml::String(s) => s.clone(),
            Yaml::Integer(i) => i.to_string(),
            other => panic!("a string, got {other:?}"),
        })
        .collect()
}

fn docs(rel: &str) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn of_kind<'a>(docs: &'a [Yaml], kind: &str) -> &'a Yaml {
    docs.iter().find(|d| d["kind"].as_str() == Some(kind)).unwrap_or_else(|| panic!("no {kind}"))
}

/// The Deployment's grace period covers its preStop pause, the drain timeout it gives
/// `f5 serve`, and the server's time to answer what the drain cut off.
fn grace_covers_drain(deployment: &Yaml) -> Result<(), String> {
    let spec = &deployment["spec"]["template"]["spec"];
    let grace = spec["terminationGracePeriodSeconds"].as_i64().ok_or("no terminationGracePeriodSeconds")?;
    let container = &spec["containers"][0];
    let args = strings(&container["args"]);
    let drain: i64 = arg_value(&args, "--drain-timeout").ok_or("no --drain-timeout in the args")?.parse().map_err(|e| format!("{e}"))?;
    let pre_stop = match &container["lifecycle"]["preStop"]["exec"]["command"] {
        Yaml::BadValue => 0,
        c => {
            let c = strings(c);
            if c.first().map(String::as_str) == Some("sleep") {
                c.get(1).and_then(|s| s.parse().ok()).ok_or("preStop sleep without seconds")?
            } else {
                0
            }
        }
    };
    let needed = pre_stop + drain + SERVER_CUT_OFF_GRACE_S;
    if grace < needed {
        return Err(format!("grace {grace} s < preStop {pre_stop} + drain {drain} + {SERVER_CUT_OFF_GRACE_S} s"));
    }
    Ok(())
}

#[test]
fn the_kubernetes_deployment_matches_the_server() {
    let all = docs("deploy/k8s/f5.yaml");
    let deployment = of_kind(&all, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args = strings(&container["args"]);
    assert_eq!(args[0], "serve");
    check_flags("the Deployment", &args, &help_flags("serve"));

    grace_covers_drain(deployment).unwrap();
    // The check above can fail: the same Deployment with a grace period shorter than the drain.
    let mut short = deployment.clone();
    if let Yaml::Hash(h) = &mut short["spec"]["template"]["spec"] {
        h.insert(Yaml::String("terminationGracePeriodSeconds".into()), Yaml::Integer(20));
    }
    assert!(grace_covers_drain(&short).is_err());

    // Ports: the container listens where --addr says, the probes and the Service use it.
    let addr = arg_value(&args, "--addr").unwrap();
    let port: i64 = addr.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(container["ports"][0]["containerPort"].as_i64(), Some(port));
    let port_name = container["ports"][0]["name"].as_str().unwrap();
    let service = of_kind(&all, "Service");
    assert_eq!(service["spec"]["ports"][0]["targetPort"].as_str(), Some(port_name));
    assert_eq!(service["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"]);

    // The HPA scales this Deployment on a metric /metrics has.
    let hpa = of_kind(&all, "HorizontalPodAutoscaler");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], deployment["metadata"]["name"]);
    let metric = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"].as_str().unwrap().to_string();

    let probes: Vec<(&str, String)> = ["startupProbe", "livenessProbe", "readinessProbe"]
        .iter()
        .map(|p| {
            let get = &container[*p]["httpGet"];
            assert_eq!(get["port"].as_str(), Some(port_name), "{p}");
            (*p, get["path"].as_str().unwrap_or_else(|| panic!("{p} has no path")).to_string())
        })
        .collect();
    assert_eq!(probes[2].1, "/ready", "readiness follows the queue, not liveness");
    assert_eq!(probes[1].1, "/health");

    // A server started with the Deployment's own flags (the fixture model and a loopback port
    // in place of the hub model and 0.0.0.0) and a token, as the Deployment sets one: the
    // kubelet's probes carry no token and must still be answered.
    let mut served = args.clone();
    let replace = |v: &mut Vec<String>, flag: &str, value: &str| {
        if let Some(i) = v.iter().position(|a| a == flag) {
            v[i + 1] = value.to_string();
        }
    };
    replace(&mut served, "--addr", "127.0.0.1:0");
    replace(&mut served, "--model", "kokoro/release-small");
    replace(&mut served, "--threads", "1");
    let voices = std::env::temp_dir().join(format!("f5-deploy-test-{}", std::process::id()));
    replace(&mut served, "--voices", voices.to_str().unwrap());
    let child = Command::new(env!("CARGO_BIN_EXE_f5"))
        .args(&served)
        .current_dir(root().join("fixtures"))
        .env("F5_TOKEN", "deploy-test-token")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line.split("http://").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_else(|| panic!("{line}")).to_string();
    let get = |path: &str, token: Option<&str>| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    for (probe, path) in &probes {
        let answer = get(path, None);
        assert!(answer.starts_with("HTTP/1.1 200"), "{probe} {path}: {answer}");
    }
    // A route that does not exist is not 200, so the probe check above means something.
    assert!(!get("/readyz", None).starts_with("HTTP/1.1 200"));
    let metrics = get("/metrics", Some("deploy-test-token"));
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.lines().any(|l| l.starts_with(&format!("{metric} "))), "{metric} is not in /metrics: {metrics}");
    // The HAProxy example checks the same readiness route.
    let haproxy = read("deploy/haproxy/haproxy.cfg");
    let check = haproxy.lines().find(|l| l.trim_start().starts_with("http-check send")).expect("an http-check send line");
    let uri = check.split_whitespace().skip_while(|w| *w != "uri").nth(1).unwrap();
    assert!(get(uri, None).starts_with("HTTP/1.1 200"), "HAProxy's check {uri}");
    drop(child);
    let _ = std::fs::remove_dir_all(&voices);
}

/// The Dockerfile's images run `f5` with flags `f5 serve` has, a drain timeout the
/// Deployment's grace period covers, and the port they expose.
#[test]
fn the_dockerfile_commands_are_real_flags() {
    let dockerfile = read("deploy/Dockerfile");
    let known = help_flags("serve");
    let exec_form = |prefix: &str| -> Vec<Vec<String>> {
        dockerfile
            .lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .map(|json| serde_json::from_str::<Vec<String>>(json.trim()).unwrap_or_else(|e| panic!("{prefix}{json}: {e}")))
            .collect()
    };
    let entrypoints = exec_form("ENTRYPOINT ");
    let commands = exec_form("CMD ");
    assert_eq!(commands.len(), 2, "a CPU and a CUDA image");
    assert!(entrypoints.iter().all(|e| e == &["f5"]), "{entrypoints:?}");
    let exposed: Vec<&str> = dockerfile.lines().filter_map(|l| l.strip_prefix("EXPOSE ")).collect();
    let deployment_docs = docs("deploy/k8s/f5.yaml");
    let deployment = of_kind(&deployment_docs, "Deployment");
    let grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap();
    for (cmd, port) in commands.iter().zip(exposed) {
        assert_eq!(cmd[0], "serve");
        check_flags("the Dockerfile's CMD", cmd, &known);
        assert!(arg_value(cmd, "--addr").is_some_and(|a| a.ends_with(&format!(":{}", port.trim()))), "{cmd:?} listens on the exposed port");
        let drain: i64 = arg_value(cmd, "--drain-timeout").unwrap().parse().unwrap();
        assert!(drain + SERVER_CUT_OFF_GRACE_S <= grace, "{cmd:?}");
    }
    assert!(commands.iter().any(|c| arg_value(c, "--device") == Some("cuda")), "the CUDA image runs on the GPU");
    assert!(dockerfile.contains("--features cuda"));
}

/// The batch examples: the Indexed Job gives every pod its completion index as the shard, out
/// of as many shards as completions; the Slurm array likewise.
#[test]
fn the_batch_examples_shard_like_their_schedulers() {
    let known = help_flags("batch");
    let all = docs("deploy/k8s/batch-job.yaml");
    let job = of_kind(&all, "Job");
    assert_eq!(job["spec"]["completionMode"].as_str(), Some("Indexed"));
    let completions = job["spec"]["completions"].as_i64().unwrap();
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    let args = strings(&container["args"]);
    assert_eq!(args[0], "batch");
    check_flags("the batch Job", &args, &known);
    let shard = arg_value(&args, "--shard").unwrap();
    let (index, count) = shard.split_once('/').unwrap();
    assert_eq!(count.parse::<i64>().ok(), Some(completions), "--shard I/N with N = completions");
    let var = index.strip_prefix("$(").and_then(|v| v.strip_suffix(')')).expect("the index comes from an environment variable");
    let env = container["env"].as_vec().unwrap().iter().find(|e| e["name"].as_str() == Some(var)).expect("the variable is set");
    assert_eq!(
        env["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.annotations['batch.kubernetes.io/job-completion-index']")
    );

    let sbatch = read("deploy/slurm/batch.sbatch");
    assert!(sbatch.contains("--shard \"${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT}\""));
    assert!(sbatch.lines().any(|l| l.starts_with("#SBATCH --array=0-")), "array indices from 0, as --shard counts");
    let command: Vec<String> = sbatch
        .lines()
        .skip_while(|l| !l.starts_with("exec f5 batch"))
        .flat_map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect();
    check_flags("the Slurm script", &command, &known);
}
