//! The hub against a real HTTP server on loopback (tests/common), and against a cache written
//! by Python's huggingface_hub (tests/data/hf-cache, made by tests/data/make_hf_cache.py).

mod common;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{hub, sha256_hex, RepoSpec, TestServer, TOKEN};
use f5_hub::{Hub, HubConfig, HubError, ModelKind, Progress};

const COMMIT: &str = "1111111111111111111111111111111111111111";
const REPO: &str = "f5-test/tiny";
const CKPT: &str = "F5TTS_Tiny/model_10.safetensors";
const CKPT_REF: &str = "f5-test/tiny/F5TTS_Tiny/model_10.safetensors";

/// Big enough that a cut half way leaves a real partial file.
fn checkpoint_bytes() -> Vec<u8> {
    (0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect()
}

fn vocab_bytes() -> Vec<u8> {
    b" \na\nb\n".to_vec()
}

fn tiny_repo() -> RepoSpec {
    RepoSpec::new(COMMIT).file(CKPT, &checkpoint_bytes(), true).file("F5TTS_Tiny/vocab.txt", &vocab_bytes(), false)
}

fn repo_cache(root: &Path) -> PathBuf {
    root.join("hf/hub/models--f5-test--tiny")
}

fn cdn_gets(server: &TestServer) -> Vec<common::Logged> {
    server.requests().into_iter().filter(|r| r.method == "GET" && r.path.starts_with("/cdn/")).collect()
}

fn with_attempts(hub_root: &Path, endpoint: &str, attempts: usize) -> Hub {
    let mut vars = HashMap::new();
    vars.insert("HOME", hub_root.join("home").display().to_string());
    vars.insert("F5_HOME", hub_root.join("f5").display().to_string());
    vars.insert("HF_HOME", hub_root.join("hf").display().to_string());
    vars.insert("HF_ENDPOINT", endpoint.to_string());
    let mut config = HubConfig::from_vars(|k| vars.get(k).cloned());
    config.max_attempts = attempts;
    config.retry_delay = Duration::ZERO;
    Hub::new(config)
}

#[test]
fn first_fetch_downloads_into_the_hf_layout_and_the_second_makes_no_request() {
    let server = TestServer::start(vec![(REPO, tiny_repo())]);
    let root = tempfile::tempdir().unwrap();
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = events.clone();
    let hub = hub(root.path(), &server.endpoint(), None, false).with_progress(move |p| {
        if let Progress::Advance { done, total, .. } = p {
            seen.lock().unwrap().push((*done, *total));
        }
    });

    let model = hub.resolve_model(CKPT_REF, None).unwrap();
    assert_eq!(model.kind, ModelKind::Reference);
    assert_eq!(fs::read(&model.checkpoint).unwrap(), checkpoint_bytes());
    assert_eq!(fs::read(model.vocab.as_ref().unwrap()).unwrap(), vocab_bytes());
    // HEAD + GET (CDN) for the checkpoint, HEAD + GET for the vocabulary.
    assert_eq!(server.request_count(), 4, "{:#?}", server.requests());

    // The layout huggingface_hub writes: blob named by the sha256, relative link, ref file.
    let cache = repo_cache(root.path());
    let sha = sha256_hex(&checkpoint_bytes());
    assert_eq!(model.checkpoint, cache.join("snapshots").join(COMMIT).join(CKPT));
    assert_eq!(fs::read_link(&model.checkpoint).unwrap(), PathBuf::from(format!("../../../blobs/{sha}")));
    assert_eq!(fs::read_to_string(cache.join("refs/main")).unwrap(), COMMIT);
    assert!(cache.join("blobs").join(&sha).is_file());
    assert!(root.path().join("hf/hub/.locks/models--f5-test--tiny").join(format!("{sha}.lock")).is_file());
    assert!(!cache.join("blobs").join(format!("{sha}.incomplete")).exists());

    let last = *events.lock().unwrap().iter().rfind(|(_, t)| *t == Some(200_000)).unwrap();
    assert_eq!(last, (200_000, Some(200_000)));

    let before = server.request_count();
    assert_eq!(hub.resolve_model(CKPT_REF, None).unwrap(), model);
    // A fresh hub (another process, in effect) also finds it without asking.
    let again = common::hub(root.path(), &server.endpoint(), None, false).resolve_model(CKPT_REF, None).unwrap();
    assert_eq!(again, model);
    assert_eq!(server.request_count(), before, "a cache hit must not touch the network");
}

#[test]
fn the_token_reaches_the_hub_but_not_the_cdn_and_its_absence_is_explained() {
    let server = TestServer::start(vec![(REPO, tiny_repo().private())]);
    let root = tempfile::tempdir().unwrap();

    let error = hub(root.path(), &server.endpoint(), None, false).resolve_model(CKPT_REF, None).unwrap_err();
    assert!(matches!(error, HubError::AuthRequired { status: 401, .. }), "{error:?}");
    assert!(error.to_string().contains("HF_TOKEN"), "{error}");

    let model = hub(root.path(), &server.endpoint(), Some(TOKEN), false).resolve_model(CKPT_REF, None).unwrap();
    assert_eq!(fs::read(&model.checkpoint).unwrap(), checkpoint_bytes());
    let requests = server.requests();
    let resolve_heads: Vec<_> = requests.iter().filter(|r| r.method == "HEAD").collect();
    assert!(resolve_heads.iter().skip(1).all(|r| r.headers.get("authorization").map(String::as_str) == Some("Bearer hf_test_token")));
    let cdn = cdn_gets(&server);
    assert_eq!(cdn.len(), 1);
    assert!(cdn[0].headers.get("host").unwrap().starts_with("localhost:"), "the CDN is another host name");
    assert!(!cdn[0].headers.contains_key("authorization"), "the token must not follow a redirect to another host");

    let error = hub(root.path(), &server.endpoint(), Some("wrong"), false).pull(CKPT_REF).unwrap_err();
    assert!(matches!(error, HubError::AccessDenied { status: 401, .. }), "{error:?}");
}

#[test]
fn offline_resolves_from_the_cache_and_fails_clearly_when_absent() {
    let server = TestServer::start(vec![(REPO, tiny_repo())]);
    let root = tempfile::tempdir().unwrap();

    let error = hub(root.path(), &server.endpoint(), None, true).resolve_model(CKPT_REF, None).unwrap_err();
    assert!(matches!(error, HubError::OfflineNotCached { .. }), "{error:?}");
    assert!(error.to_string().contains("HF_HUB_OFFLINE") && error.to_string().contains(CKPT_REF), "{error}");
    assert_eq!(server.request_count(), 0, "offline must never touch the network");

    let online = hub(root.path(), &server.endpoint(), None, false).resolve_model(CKPT_REF, None).unwrap();
    let count = server.request_count();
    let offline = hub(root.path(), &server.endpoint(), None, true);
    assert_eq!(offline.resolve_model(CKPT_REF, None).unwrap(), online);
    assert_eq!(offline.pull(CKPT_REF).unwrap().len(), 2);
    assert_eq!(server.request_count(), count);
}

#[test]
fn an_interrupted_download_resumes_with_a_range_request() {
    let server = TestServer::start(vec![(REPO, tiny_repo())]);
    let root = tempfile::tempdir().unwrap();
    server.truncate_next(CKPT, 1);

    let model = hub(root.path(), &server.endpoint(), None, false).resolve_model(CKPT_REF, None).unwrap();
    assert_eq!(fs::read(&model.checkpoint).unwrap(), checkpoint_bytes());
    let cdn = cdn_gets(&server);
    assert_eq!(cdn.len(), 2, "{cdn:#?}");
    assert!(!cdn[0].headers.contains_key("range"));
    assert_eq!(cdn[1].headers.get("range").map(String::as_str), Some("bytes=100000-"), "resume after the half that arrived");
}

#[test]
fn a_partial_file_left_by_an_earlier_run_is_resumed() {
    let server = TestServer::start(vec![(REPO, tiny_repo())]);
    let root = tempfile::tempdir().unwrap();
    server.truncate_next(CKPT, 1);

    let error = with_attempts(root.path(), &server.endpoint(), 1).resolve_model(CKPT_REF, None).unwrap_err();
    assert!(matches!(error, HubError::DownloadFailed { attempts: 1, .. }), "{error:?}");
    let sha = sha256_hex(&checkpoint_bytes());
    let partial = repo_cache(root.path()).join("blobs").join(format!("{sha}.incomplete"));
    assert_eq!(fs::metadata(&partial).unwrap().len(), 100_000);

    let model = with_attempts(root.path(), &server.endpoint(), 1).resolve_model(CKPT_REF, None).unwrap();
    assert_eq!(fs::read(&model.checkpoint).unwrap(), checkpoint_bytes());
    let cdn = cdn_gets(&server);
    assert_eq!(cdn.last().unwrap().headers.get("range").map(String::as_str), Some("bytes=100000-"));
    assert!(!partial.exists());
}

#[test]
fn a_download_with_the_wrong_sha256_is_refused_and_fetched_again() {
    let server = TestServer::start(vec![(REPO, tiny_repo())]);
    let root = tempfile::tempdir().unwrap();

    server.corrupt_next(CKPT, 1);
    let error = with_attempts(root.path(), &server.endpoint(), 1).resolve_model(CKPT_REF, None).unwrap_err();
    match &error {
        HubError::DownloadFailed { source, .. } => assert!(matches!(**source, HubError::ChecksumMismatch { .. }), "{source:?}"),
        other => panic!("expected a refused download, got {other:?}"),
    }
    let blobs = repo_cache(root.path()).join("blobs");
    assert!(fs::read_dir(&blobs).unwrap().next().is_none(), "nothing of the bad download may stay");

    server.corrupt_next(CKPT, 1);
    let model = hub(root.path(), &server.endpoint(), None, false).resolve_model(CKPT_REF, None).unwrap();
    assert_eq!(fs::read(&model.checkpoint).unwrap(), checkpoint_bytes());
    assert_eq!(cdn_gets(&server).len(), 3);
    assert!(cdn_gets(&server).iter().all(|r| !r.headers.contains_key("range")), "a refused file is fetched from the start");
}

#[test]
fn pull_finds_a_corrupted_blob_on_disk_and_replaces_it() {
    let server = TestServer::start(vec![(REPO, tiny_repo())]);
    let root = tempfile::tempdir().unwrap();
    let hub = hub(root.path(), &server.endpoint(), None, false);
    let model = hub.resolve_model(CKPT_REF, None).unwrap();
    let blob = fs::canonicalize(&model.checkpoint).unwrap();
    fs::write(&blob, vec![0u8; 200_000]).unwrap();

    let pulled = hub.pull(CKPT_REF).unwrap();
    assert_eq!(pulled.len(), 2, "the checkpoint and the vocab beside it");
    assert_eq!(pulled[0].path, model.checkpoint);
    assert_eq!(fs::read(&model.checkpoint).unwrap(), checkpoint_bytes());
    assert_eq!(cdn_gets(&server).len(), 2);
}

#[test]
fn pull_follows_a_moved_branch() {
    let server = TestServer::start(vec![(REPO, tiny_repo())]);
    let root = tempfile::tempdir().unwrap();
    let hub = hub(root.path(), &server.endpoint(), None, false);
    hub.resolve_model(CKPT_REF, None).unwrap();
    let newer = "2222222222222222222222222222222222222222";
    server.set_commit(REPO, newer);

    // resolve trusts the cache; pull asks.
    assert!(hub.resolve_model(CKPT_REF, None).unwrap().checkpoint.starts_with(repo_cache(root.path()).join("snapshots").join(COMMIT)));
    let pulled = hub.pull(CKPT_REF).unwrap();
    assert!(pulled[0].path.starts_with(repo_cache(root.path()).join("snapshots").join(newer)));
    assert_eq!(fs::read_to_string(repo_cache(root.path()).join("refs/main")).unwrap(), newer);
    assert_eq!(cdn_gets(&server).len(), 1, "same blob, no second download");

    // A pinned commit resolves from its snapshot without a request.
    let count = server.request_count();
    let pinned = hub.resolve_model(&format!("{CKPT_REF}@{COMMIT}"), None).unwrap();
    assert_eq!(fs::read(pinned.checkpoint).unwrap(), checkpoint_bytes());
    assert_eq!(server.request_count(), count);
}

#[test]
fn two_concurrent_pulls_of_one_file_share_one_intact_blob() {
    let server = TestServer::start(vec![(REPO, tiny_repo())]);
    server.slow(CKPT, Duration::from_millis(300));
    let root = tempfile::tempdir().unwrap();
    let endpoint = server.endpoint();
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (root, endpoint) = (root.path(), endpoint.as_str());
                scope.spawn(move || hub(root, endpoint, None, false).resolve_model(CKPT_REF, None))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first = results[0].as_ref().unwrap();
    assert_eq!(results[1].as_ref().unwrap(), first);
    assert_eq!(fs::read(&first.checkpoint).unwrap(), checkpoint_bytes());
    assert_eq!(cdn_gets(&server).len(), 1, "the second waits on the lock and finds the blob");
    let blobs: Vec<_> = fs::read_dir(repo_cache(root.path()).join("blobs")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(blobs.len(), 2, "checkpoint and vocab blobs only, no leftovers: {blobs:?}");
}

#[test]
fn bad_names_are_refused_without_a_request() {
    let server = TestServer::start(vec![(REPO, tiny_repo())]);
    let root = tempfile::tempdir().unwrap();
    let hub = hub(root.path(), &server.endpoint(), None, false);
    let long = "a".repeat(5000);
    type Check = fn(&HubError) -> bool;
    let cases: Vec<(&str, Check)> = vec![
        ("", |e| matches!(e, HubError::EmptyName)),
        // Names that read as local paths and do not exist are never asked of the hub.
        ("../x", |e| matches!(e, HubError::NoSuchPath { .. })),
        ("has.dot", |e| matches!(e, HubError::NoSuchPath { .. })),
        ("a/../../b", |e| matches!(e, HubError::InvalidReference { .. })),
        ("f5-test/tiny/../../etc/passwd", |e| matches!(e, HubError::InvalidReference { .. })),
        ("f5-test/tiny/a@..", |e| matches!(e, HubError::InvalidReference { .. })),
        (&long, |e| matches!(e, HubError::NameTooLong { len: 5000, .. })),
        ("has space", |e| matches!(e, HubError::InvalidName { .. })),
        ("nosuchmodel", |e| matches!(e, HubError::UnknownLocalId { .. })),
        ("f5-test/tiny", |e| matches!(e, HubError::RepositoryNotAFile { .. })),
    ];
    for (name, expected) in cases {
        let error = hub.resolve_model(name, None).unwrap_err();
        assert!(expected(&error), "{name:?}: {error:?}");
    }
    assert!(hub.resolve_model(CKPT_REF, Some("not-a-file")).is_err());
    assert_eq!(server.request_count(), 0);
    assert_eq!(
        hub.resolve_model("a/../../b", None).unwrap_err().to_string(),
        "'a/../../b' is not an existing path, and not a valid owner/repo/file reference: repository name '..' may not start or end with '-' or '.', nor contain '--' or '..'"
    );
}

#[test]
fn a_missing_file_is_a_404_that_names_it_and_a_missing_vocab_is_remembered() {
    let repo = RepoSpec::new(COMMIT).file("ckpt/model.safetensors", b"weights", true);
    let server = TestServer::start(vec![(REPO, repo)]);
    let root = tempfile::tempdir().unwrap();
    let hub = hub(root.path(), &server.endpoint(), None, false);

    let error = hub.resolve_model("f5-test/tiny/ckpt/nope.safetensors", None).unwrap_err();
    assert!(matches!(error, HubError::RemoteNotFound { what: "file", .. }), "{error:?}");
    assert!(error.to_string().contains("/f5-test/tiny/resolve/main/ckpt/nope.safetensors"), "{error}");
    let error = hub.resolve_model("f5-test/absent/x.pt", None).unwrap_err();
    assert!(matches!(error, HubError::RemoteNotFound { what: "repository", .. }), "{error:?}");

    let model = hub.resolve_model("f5-test/tiny/ckpt/model.safetensors", None).unwrap();
    assert_eq!(model.vocab, None, "no vocab.txt in the repository: the caller's default applies");
    assert!(repo_cache(root.path()).join(".no_exist").join(COMMIT).join("ckpt/vocab.txt").is_file());
    let count = server.request_count();
    assert_eq!(hub.resolve_model("f5-test/tiny/ckpt/model.safetensors", None).unwrap(), model);
    assert_eq!(server.request_count(), count, "the known absence is not asked again");
}

#[test]
fn a_vocoder_repository_brings_its_weights_and_config() {
    let repo = RepoSpec::new(COMMIT).file("pytorch_model.bin", b"vocos weights", true).file("config.yaml", b"sample_rate: 24000\n", false);
    let server = TestServer::start(vec![("charactr/vocos-mel-24khz", repo)]);
    let root = tempfile::tempdir().unwrap();
    let hub = hub(root.path(), &server.endpoint(), None, false);
    let vocoder = hub.resolve_vocoder("charactr/vocos-mel-24khz").unwrap();
    assert_eq!(fs::read(&vocoder.weights).unwrap(), b"vocos weights");
    assert_eq!(fs::read(vocoder.config.unwrap()).unwrap(), b"sample_rate: 24000\n");
    assert!(vocoder.weights.ends_with(format!("models--charactr--vocos-mel-24khz/snapshots/{COMMIT}/pytorch_model.bin")));
}

#[test]
fn paths_and_local_ids_resolve_before_references() {
    let root = tempfile::tempdir().unwrap();
    let hub = hub(root.path(), "http://127.0.0.1:9", None, true);
    let local = root.path().join("f5/models/my-voice_2");
    fs::create_dir_all(&local).unwrap();
    fs::write(local.join("model_1.safetensors"), b"s").unwrap();
    fs::write(local.join("model_1.pt"), b"p").unwrap();
    fs::write(local.join("vocab.txt"), b"v").unwrap();

    let model = hub.resolve_model("my-voice_2", None).unwrap();
    assert_eq!((model.kind, model.checkpoint.clone()), (ModelKind::Local, local.join("model_1.safetensors")));
    assert_eq!(model.vocab, Some(local.join("vocab.txt")));

    let dir = local.to_str().unwrap();
    assert_eq!(hub.resolve_model(dir, None).unwrap().kind, ModelKind::Path);
    let file = local.join("model_1.pt");
    let by_file = hub.resolve_model(file.to_str().unwrap(), None).unwrap();
    assert_eq!((by_file.checkpoint, by_file.vocab), (file.clone(), Some(local.join("vocab.txt"))));
    let other_vocab = root.path().join("other.txt");
    fs::write(&other_vocab, b"o").unwrap();
    assert_eq!(hub.resolve_model("my-voice_2", other_vocab.to_str()).unwrap().vocab, Some(other_vocab));

    fs::write(local.join("model_2.safetensors"), b"s").unwrap();
    assert!(matches!(hub.resolve_model("my-voice_2", None).unwrap_err(), HubError::AmbiguousCheckpoint { .. }));

    // A server refuses paths: the same name is then only a (bad) reference.
    let strict = common::hub(root.path(), "http://127.0.0.1:9", None, true).allow_paths(false);
    assert!(matches!(strict.resolve_model(file.to_str().unwrap(), None).unwrap_err(), HubError::InvalidReference { .. }));

    let names: Vec<(String, ModelKind, u64)> = hub.list().into_iter().map(|e| (e.name, e.kind, e.size)).collect();
    // Four one-byte files.
    assert_eq!(names, vec![("my-voice_2".to_string(), ModelKind::Local, 4)]);
}

/// The committed cache was written by huggingface_hub itself (make_hf_cache.py); it must be
/// used as it is, with no request. The server is there only to count.
#[test]
fn a_cache_written_by_python_huggingface_hub_is_reused_without_a_request() {
    let server = TestServer::start(vec![]);
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hf-cache");
    let root = tempfile::tempdir().unwrap();
    let mut vars = HashMap::new();
    vars.insert("HOME", root.path().display().to_string());
    vars.insert("HF_HUB_CACHE", data.display().to_string());
    vars.insert("HF_ENDPOINT", server.endpoint());
    let hub = Hub::new(HubConfig::from_vars(|k| vars.get(k).cloned()));

    let model = hub.resolve_model("f5-test/tiny-f5/F5TTS_Tiny/model_10.safetensors", None).unwrap();
    assert_eq!(fs::read(&model.checkpoint).unwrap(), b"tiny f5 checkpoint placeholder\n".repeat(8));
    assert_eq!(fs::read(model.vocab.unwrap()).unwrap(), b" \na\nb\nc\n");
    let vocoder = hub.resolve_vocoder("f5-test/tiny-vocos").unwrap();
    assert_eq!(fs::read(&vocoder.weights).unwrap(), b"tiny vocos weights placeholder\n".repeat(4));
    assert!(vocoder.config.is_some());
    assert_eq!(server.request_count(), 0);

    let listed: Vec<(String, u64, Vec<String>)> = hub.list().into_iter().map(|e| (e.name, e.size, e.refs)).collect();
    let main = vec!["main".to_string()];
    assert_eq!(
        listed,
        vec![
            ("f5-test/tiny-f5/F5TTS_Tiny/model_10.safetensors".to_string(), 31 * 8, main.clone()),
            ("f5-test/tiny-f5/F5TTS_Tiny/vocab.txt".to_string(), 8, main.clone()),
            ("f5-test/tiny-vocos/config.yaml".to_string(), 45, main.clone()),
            ("f5-test/tiny-vocos/pytorch_model.bin".to_string(), 31 * 4, main),
        ]
    );
}

/// Everything under `root` except lock files: path → file bytes, or link target.
fn tree(root: &Path) -> Vec<(String, Result<Vec<u8>, PathBuf>)> {
    fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, Result<Vec<u8>, PathBuf>)>) {
        for entry in fs::read_dir(dir).unwrap().flatten() {
            let name = entry.file_name().into_string().unwrap();
            let relative = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
            let meta = fs::symlink_metadata(entry.path()).unwrap();
            if relative == ".locks" {
                continue;
            } else if meta.is_dir() {
                walk(&entry.path(), &relative, out);
            } else if meta.file_type().is_symlink() {
                out.push((relative, Err(fs::read_link(entry.path()).unwrap())));
            } else {
                out.push((relative, Ok(fs::read(entry.path()).unwrap())));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, "", &mut out);
    out.sort();
    out
}

/// The other direction: fetching the same files from a server that answers as the one
/// make_hf_cache.py used, this crate writes the very tree huggingface_hub wrote: same blob
/// names, same relative links, same refs, same CACHEDIR.TAG.
#[test]
fn this_crate_writes_the_same_tree_as_python_huggingface_hub() {
    let python_tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hf-cache");
    let mut repos: Vec<(String, RepoSpec)> = Vec::new();
    let mut names = Vec::new();
    for entry in tree(&python_tree) {
        let (path, Err(target)) = entry else { continue };
        // models--{owner}--{repo}/snapshots/{commit}/{file path}
        let mut parts = path.splitn(4, '/');
        let (folder, _, commit, file) = (parts.next().unwrap(), parts.next(), parts.next().unwrap(), parts.next().unwrap());
        let repo_id = folder.strip_prefix("models--").unwrap().replacen("--", "/", 1);
        let etag = target.file_name().unwrap().to_str().unwrap().to_string();
        let bytes = fs::read(python_tree.join(&path)).unwrap();
        let lfs = etag.len() == 64;
        let index = match repos.iter().position(|(id, _)| *id == repo_id) {
            Some(i) => i,
            None => {
                repos.push((repo_id.clone(), RepoSpec::new(commit)));
                repos.len() - 1
            }
        };
        let spec = repos[index].1.clone().file(file, &bytes, lfs).etag(file, &etag);
        repos[index].1 = spec;
        names.push(format!("{repo_id}/{file}"));
    }
    assert_eq!(names.len(), 4);
    let server = TestServer::start(repos.iter().map(|(id, spec)| (id.as_str(), spec.clone())).collect());
    let root = tempfile::tempdir().unwrap();
    let hub = hub(root.path(), &server.endpoint(), None, false);
    for name in &names {
        hub.fetch(&f5_hub::Reference::parse(name).unwrap()).unwrap();
    }
    assert_eq!(tree(&root.path().join("hf/hub")), tree(&python_tree));
}

/// A Kokoro release repository (`config.json` with an `istftnet` section, `kokoro-v1_0.pth`,
/// `voices/NAME.pt`) named by the repository alone: told apart from F5 by its files, the
/// checkpoint and config fetched at once, a voice on first use, and nothing asked twice.
#[test]
fn a_kokoro_repository_resolves_by_its_files_and_fetches_voices_on_demand() {
    let config = br#"{"istftnet": {"upsample_rates": [10, 6]}, "n_token": 178}"#;
    let weights: Vec<u8> = (0..50_000u32).map(|i| (i.wrapping_mul(40_503) >> 8) as u8).collect();
    let voice = vec![7u8; 4096];
    let repo = RepoSpec::new(COMMIT).file("config.json", config, false).file("kokoro-v1_0.pth", &weights, true).file(
        "voices/af_heart.pt",
        &voice,
        true,
    );
    let f5_like = RepoSpec::new(COMMIT).file("config.json", br#"{"model": "F5TTS_v1_Base"}"#, false);
    let server = TestServer::start(vec![("hexgrad/Kokoro-82M", repo), ("someone/f5-repo", f5_like)]);
    let root = tempfile::tempdir().unwrap();
    let hub = hub(root.path(), &server.endpoint(), None, false);

    let f5_hub::Resolved::Kokoro(k) = hub.resolve("hexgrad/Kokoro-82M", None).unwrap() else { panic!("not read as Kokoro") };
    assert_eq!(k.kind, ModelKind::Reference);
    assert_eq!(fs::read(&k.checkpoint).unwrap(), weights);
    assert_eq!(fs::read(k.checkpoint.with_file_name("config.json")).unwrap(), config);
    assert_eq!(k.voices_dir, k.checkpoint.with_file_name("voices"));
    let repo = k.repo.clone().expect("a hub model keeps its repository");
    assert!(!k.voices_dir.join("af_heart.pt").exists(), "voices come on first use");
    let path = hub.fetch_voice(&repo, "af_heart").unwrap().expect("the repository has af_heart");
    assert_eq!(fs::read(&path).unwrap(), voice);
    assert_eq!(path, k.voices_dir.join("af_heart.pt"));
    assert_eq!(hub.fetch_voice(&repo, "af_nobody").unwrap(), None);
    assert!(matches!(hub.fetch_voice(&repo, "../config"), Err(HubError::InvalidReference { .. })), "a voice name cannot leave voices/");

    let before = server.request_count();
    assert_eq!(hub.resolve("hexgrad/Kokoro-82M", None).unwrap(), f5_hub::Resolved::Kokoro(k.clone()));
    assert_eq!(hub.fetch_voice(&repo, "af_heart").unwrap(), Some(path));
    assert_eq!(server.request_count(), before, "a cache hit must not touch the network");

    // A repository whose config is not Kokoro's is still not a file to load.
    assert!(matches!(hub.resolve("someone/f5-repo", None), Err(HubError::RepositoryNotAFile { .. })));
    // On disk, the same layout is found in a directory; an F5 directory stays F5.
    let dir = root.path().join("kokoro-local");
    fs::create_dir_all(dir.join("voices")).unwrap();
    fs::write(dir.join("config.json"), config).unwrap();
    fs::write(dir.join("kokoro-v1_0.pth"), &weights).unwrap();
    let f5_hub::Resolved::Kokoro(local) = hub.resolve(dir.to_str().unwrap(), None).unwrap() else { panic!("local dir not Kokoro") };
    assert_eq!((local.checkpoint, local.voices_dir, local.repo, local.kind), (dir.clone(), dir.join("voices"), None, ModelKind::Path));
    let f5_dir = root.path().join("f5-local");
    fs::create_dir_all(&f5_dir).unwrap();
    fs::write(f5_dir.join("model.safetensors"), b"x").unwrap();
    fs::write(f5_dir.join("vocab.txt"), vocab_bytes()).unwrap();
    assert!(matches!(hub.resolve(f5_dir.to_str().unwrap(), None).unwrap(), f5_hub::Resolved::F5(_)));
}
