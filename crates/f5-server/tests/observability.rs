//! What an orchestrator and a scraper see: `/metrics` parsed as Prometheus parses it (counters
//! move as requests are served), `/ready` beside `/health`, and a request id on every answer.

mod common;

use common::{client, start_with, tts_body};

/// The samples of one scrape, by metric name and labels.
async fn scrape(c: &reqwest::Client, url: &str, token: Option<&str>) -> prometheus_parse::Scrape {
    let mut r = c.get(url);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().contains("openmetrics-text"));
    let text = r.text().await.unwrap();
    // The parser reads the Prometheus text format; OpenMetrics' closing "# EOF" is a comment to it.
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap_or_else(|e| panic!("unparsable metrics: {e}\n{text}"))
}

fn value(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s.samples.iter().find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(v))).map(|x| match &x.value {
        prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => *v,
        prometheus_parse::Value::Histogram(h) => h.iter().map(|b| b.count).fold(0.0, f64::max),
        prometheus_parse::Value::Summary(_) => f64::NAN,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_as_requests_are_served() {
    const TOKEN: &str = "metrics-token";
    let s = start_with(|c| c.token = Some(TOKEN.into()), false).await;
    let c = client();
    let url = s.url("/metrics");
    // Behind the token like the other endpoints; /ready and /health are open.
    assert_eq!(c.get(&url).send().await.unwrap().status(), 401);
    let r = c.get(s.url("/ready")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["ready"], true);

    let before = scrape(&c, &url, Some(TOKEN)).await;
    assert_eq!(value(&before, "f5_queue_capacity", &[]), Some(16.0));
    assert_eq!(value(&before, "f5_jobs_done_total", &[]), Some(0.0));
    assert_eq!(value(&before, "f5_requests_total", &[("endpoint", "/tts"), ("status", "200")]), None);
    assert!(value(&before, "f5_process_resident_memory_bytes", &[]).is_some_and(|b| b > 1e6));

    for seed in [1, 2] {
        let r = c
            .post(s.url("/tts"))
            .bearer_auth(TOKEN)
            .header("x-request-id", format!("req-{seed}"))
            .json(&tts_body("Hello there.", seed))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-request-id"], format!("req-{seed}").as_str(), "a client's request id comes back");
    }
    let r = c.post(s.url("/tts")).bearer_auth(TOKEN).json(&serde_json::json!({ "voice": "nobody", "text": "Hi." })).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let generated = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(generated.len() == 16 && generated.chars().all(|c| c.is_ascii_hexdigit()), "an id is assigned: {generated}");

    let after = scrape(&c, &url, Some(TOKEN)).await;
    assert_eq!(value(&after, "f5_requests_total", &[("endpoint", "/tts"), ("status", "200")]), Some(2.0));
    assert_eq!(value(&after, "f5_requests_total", &[("endpoint", "/tts"), ("status", "404")]), Some(1.0));
    assert_eq!(value(&after, "f5_jobs_done_total", &[]), Some(2.0));
    assert_eq!(value(&after, "f5_synthesis_seconds_count", &[]), Some(2.0));
    assert!(value(&after, "f5_audio_seconds_sum", &[]).is_some_and(|v| v > 0.5), "two answers of audio");
    assert_eq!(value(&after, "f5_model_loads_total", &[]), Some(1.0));
    s.shutdown().await;
}
