//! The public API of every library crate, as a committed snapshot: `crates/NAME/api.txt` lists
//! each `pub` item's signature (functions without bodies, structs with their public fields,
//! enums with their variants, traits with their methods, `pub use` re-exports). The test fails
//! with the difference when the source no longer matches, so an API change is always a
//! reviewed change of that file. `F5_UPDATE_API=1 cargo test -p xtask --test public_api`
//! rewrites the snapshots.
//!
//! Why not `cargo public-api` or `cargo-semver-checks`: both read rustdoc's JSON, which needs a
//! nightly toolchain, and the CI runs stable. A scan of the source with `syn` sees what a user
//! can name, item by item, and needs nothing but the source.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use quote::ToTokens;
use syn::{Attribute, Fields, ImplItem, Item, TraitItem, Visibility};

/// The crates a user depends on (the binary and the daemon are not libraries).
const LIBRARIES: &[&str] = &[
    "f5-audio",
    "f5-dit",
    "f5-g2p",
    "f5-gpukit",
    "f5-hub",
    "f5-kokoro",
    "f5-nn",
    "f5-synth",
    "f5-text",
    "f5-torchpt",
    "f5-verify",
    "f5-vocos",
];

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates")
}

fn is_pub(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

/// `#[cfg(test)]` code is not API.
fn is_test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("cfg") && a.to_token_stream().to_string().contains("test"))
}

fn is_hidden(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| match &a.meta {
        syn::Meta::List(list) => list.path.is_ident("doc") && list.tokens.to_string() == "hidden",
        _ => false,
    })
}

/// Attributes that are part of the API (`non_exhaustive`, `cfg(feature)`, `doc(hidden)`,
/// derives); doc comments and lints are not.
fn api_attrs(attrs: &[Attribute]) -> String {
    let mut out = String::new();
    for a in attrs {
        let keep = ["non_exhaustive", "cfg", "derive", "repr", "must_use"].iter().any(|k| a.path().is_ident(k))
            || is_hidden(std::slice::from_ref(a));
        if keep {
            out.push_str(&tidy(&a.to_token_stream().to_string()));
            out.push(' ');
        }
    }
    out
}

/// Token strings with the spacing a person would write.
fn tidy(tokens: &str) -> String {
    let mut s = tokens.to_string();
    for (from, to) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" < ", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ,", ","),
        ("( ", "("),
        (" )", ")"),
        ("& ", "&"),
        ("[ ", "["),
        (" ]", "]"),
        ("# [", "#["),
        (" ;", ";"),
        ("! [", "!["),
        (" (", "("),
        (" : ", ": "),
        // a trailing comma is formatting, not API
        (", }", " }"),
        (",)", ")"),
        (", >", ">"),
    ] {
        s = s.replace(from, to);
    }
    s.replace("->", " -> ").replace("  ", " ").replace("fn(", "fn (").replace(" (", "(")
}

fn strip_docs(attrs: &mut Vec<Attribute>) {
    attrs.retain(|a| !a.path().is_ident("doc") || is_hidden(std::slice::from_ref(a)));
}

fn item_lines(item: &Item, module: &str, out: &mut Vec<String>) {
    let at = |s: String| if module.is_empty() { s } else { format!("{module}: {s}") };
    match item {
        Item::Fn(f) if is_pub(&f.vis) && !is_test_only(&f.attrs) => {
            out.push(at(format!("{}pub {}", api_attrs(&f.attrs), tidy(&f.sig.to_token_stream().to_string()))))
        }
        Item::Struct(s) if is_pub(&s.vis) && !is_test_only(&s.attrs) => {
            let mut s = s.clone();
            if let Fields::Named(named) = &mut s.fields {
                named.named = named
                    .named
                    .iter()
                    .filter(|f| is_pub(&f.vis))
                    .cloned()
                    .map(|mut f| {
                        strip_docs(&mut f.attrs);
                        f
                    })
                    .collect();
            }
            if let Fields::Unnamed(unnamed) = &mut s.fields {
                for f in unnamed.unnamed.iter_mut() {
                    strip_docs(&mut f.attrs);
                    if !is_pub(&f.vis) {
                        f.ty = syn::parse_quote!(_);
                    }
                }
            }
            let attrs = api_attrs(&s.attrs);
            s.attrs.clear();
            out.push(at(format!("{attrs}{}", tidy(&s.to_token_stream().to_string()))));
        }
        Item::Enum(e) if is_pub(&e.vis) && !is_test_only(&e.attrs) => {
            let mut e = e.clone();
            for v in e.variants.iter_mut() {
                v.attrs.retain(|a| {
                    !a.path().is_ident("doc") && !a.path().is_ident("error") && !a.path().is_ident("from") && !a.path().is_ident("source")
                });
                for f in v.fields.iter_mut() {
                    f.attrs.retain(|a| !a.path().is_ident("doc") && !a.path().is_ident("source"));
                }
            }
            let attrs = api_attrs(&e.attrs);
            e.attrs.clear();
            out.push(at(format!("{attrs}{}", tidy(&e.to_token_stream().to_string()))));
        }
        Item::Trait(t) if is_pub(&t.vis) && !is_test_only(&t.attrs) => {
            let mut head = format!("{}pub trait {}{}", api_attrs(&t.attrs), t.ident, tidy(&t.generics.to_token_stream().to_string()));
            if !t.supertraits.is_empty() {
                let _ = write!(head, ": {}", tidy(&t.supertraits.to_token_stream().to_string()));
            }
            out.push(at(head));
            for ti in &t.items {
                match ti {
                    TraitItem::Fn(f) => out.push(at(format!(
                        "    {}{}{}",
                        api_attrs(&f.attrs),
                        tidy(&f.sig.to_token_stream().to_string()),
                        if f.default.is_some() { " (provided)" } else { "" }
                    ))),
                    TraitItem::Type(ty) => out.push(at(format!("    type {}", ty.ident))),
                    TraitItem::Const(c) => out.push(at(format!("    const {}: {}", c.ident, tidy(&c.ty.to_token_stream().to_string())))),
                    _ => {}
                }
            }
        }
        Item::Impl(i) if !is_test_only(&i.attrs) => {
            let self_ty = tidy(&i.self_ty.to_token_stream().to_string());
            let generics = tidy(&i.generics.to_token_stream().to_string());
            match &i.trait_ {
                Some((neg, path, _)) => {
                    let path = tidy(&path.to_token_stream().to_string());
                    out.push(at(format!("impl{generics} {}{path} for {self_ty}", if neg.is_some() { "!" } else { "" })));
                }
                None => {
                    for ii in &i.items {
                        if let ImplItem::Fn(f) = ii {
                            if is_pub(&f.vis) && !is_test_only(&f.attrs) {
                                out.push(at(format!(
                                    "impl{generics} {self_ty}: {}pub {}",
                                    api_attrs(&f.attrs),
                                    tidy(&f.sig.to_token_stream().to_string())
                                )));
                            }
                        }
                        if let ImplItem::Const(c) = ii {
                            if is_pub(&c.vis) {
                                out.push(at(format!(
                                    "impl {self_ty}: pub const {}: {}",
                                    c.ident,
                                    tidy(&c.ty.to_token_stream().to_string())
                                )));
                            }
                        }
                    }
                }
            }
        }
        Item::Const(c) if is_pub(&c.vis) => out.push(at(format!("pub const {}: {}", c.ident, tidy(&c.ty.to_token_stream().to_string())))),
        Item::Static(s) if is_pub(&s.vis) => out.push(at(format!("pub static {}: {}", s.ident, tidy(&s.ty.to_token_stream().to_string())))),
        Item::Type(t) if is_pub(&t.vis) => {
            let mut t = t.clone();
            let attrs = api_attrs(&t.attrs);
            t.attrs.clear();
            out.push(at(format!("{attrs}{}", tidy(&t.to_token_stream().to_string()))));
        }
        Item::Use(u) if is_pub(&u.vis) && !is_test_only(&u.attrs) => {
            let mut u = u.clone();
            let attrs = api_attrs(&u.attrs);
            u.attrs.clear();
            out.push(at(format!("{attrs}{}", tidy(&u.to_token_stream().to_string()))));
        }
        // The option structs' builder setters are generated by a local `setters!` macro.
        Item::Macro(m) if m.mac.path.is_ident("setters") => out.push(at(format!("setters!({})", tidy(&m.mac.tokens.to_string())))),
        Item::Macro(m) if m.attrs.iter().any(|a| a.path().is_ident("macro_export")) => {
            out.push(at(format!("macro {}!", m.ident.as_ref().map_or(String::new(), |i| i.to_string()))));
        }
        _ => {}
    }
}

/// Walks a module's items, following `mod name;` to its file. `dir` is where its children's
/// files are.
fn walk(items: &[Item], module: &str, dir: &Path, out: &mut Vec<String>) {
    for item in items {
        item_lines(item, module, out);
        let Item::Mod(m) = item else { continue };
        if is_test_only(&m.attrs) {
            continue;
        }
        let name = m.ident.to_string();
        let path = if module.is_empty() { name.clone() } else { format!("{module}::{name}") };
        let shown = if is_pub(&m.vis) { format!("{}pub mod {path}", api_attrs(&m.attrs)) } else { String::new() };
        if !shown.is_empty() {
            out.push(shown);
        }
        match &m.content {
            Some((_, inner)) => walk(inner, &path, &dir.join(&name), out),
            None => {
                // An explicit #[path] is not used in these crates; the two standard layouts are.
                let file = [dir.join(format!("{name}.rs")), dir.join(&name).join("mod.rs")].into_iter().find(|p| p.exists());
                let file = file.unwrap_or_else(|| panic!("module {path}: no file under {}", dir.display()));
                let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                walk(&parsed.items, &path, &dir.join(&name), out);
            }
        }
    }
}

fn api_of(krate: &str) -> String {
    let src = crates_dir().join(krate).join("src");
    let lib = src.join("lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
    let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
    let mut lines = Vec::new();
    walk(&parsed.items, "", &src, &mut lines);
    let mut out = format!("# The public API of {krate}, checked by xtask/tests/public_api.rs (F5_UPDATE_API=1 rewrites it).\n");
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// A line diff good enough to show what changed: lines only in the snapshot, then lines only in
/// the source.
fn diff(old: &str, new: &str) -> String {
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let mut out = String::new();
    for l in &old_lines {
        if !new_lines.contains(l) {
            let _ = writeln!(out, "- {l}");
        }
    }
    for l in &new_lines {
        if !old_lines.contains(l) {
            let _ = writeln!(out, "+ {l}");
        }
    }
    if out.is_empty() {
        out.push_str("(same lines, different order)\n");
    }
    out
}

#[test]
fn public_api_matches_the_snapshots() {
    let update = std::env::var_os("F5_UPDATE_API").is_some_and(|v| v == "1");
    let mut failures = String::new();
    for krate in LIBRARIES {
        let snapshot = crates_dir().join(krate).join("api.txt");
        let current = api_of(krate);
        if update {
            std::fs::write(&snapshot, &current).unwrap_or_else(|e| panic!("{}: {e}", snapshot.display()));
            continue;
        }
        let committed = std::fs::read_to_string(&snapshot).unwrap_or_default();
        if committed != current {
            let _ = write!(failures, "\n== {krate} (crates/{krate}/api.txt)\n{}", diff(&committed, &current));
        }
    }
    assert!(
        failures.is_empty(),
        "the public API changed; if that is intended, run `F5_UPDATE_API=1 cargo test -p xtask --test public_api` and commit the api.txt files:{failures}"
    );
}

/// The scan sees what it must: a `pub` function, a public field but not a private one, a
/// re-export, and nothing under `#[cfg(test)]`. (Without this the snapshot could be empty and
/// the test above pass whatever the source said.)
#[test]
fn the_scan_sees_pub_items_and_only_those() {
    let src = r#"
        pub use inner::Thing;
        /// Docs are not API.
        pub fn open(path: &str) -> Result<(), String> { Ok(()) }
        fn private() {}
        #[non_exhaustive]
        pub struct Options { pub steps: usize, secret: u8 }
        #[cfg(test)]
        mod tests { pub fn helper() {} }
        pub enum Choice { A, B { x: u32 } }
        impl Options { pub fn with_steps(self, n: usize) -> Self { self } fn internal(&self) {} }
        /// The hidden layer's width (a doc comment that merely says "hidden").
        pub fn layer() {}
        #[doc(hidden)]
        pub fn stage() {}
    "#;
    let parsed = syn::parse_file(src).expect("parses");
    let mut lines = Vec::new();
    walk(&parsed.items, "", Path::new("/nonexistent"), &mut lines);
    let all = lines.join("\n");
    assert!(all.contains("pub use inner::Thing;"), "{all}");
    assert!(all.contains("pub fn open(path: &str) -> Result<(), String>"), "{all}");
    assert!(all.contains("#[non_exhaustive] pub struct Options { pub steps: usize }"), "{all}");
    assert!(all.contains("impl Options: pub fn with_steps(self, n: usize) -> Self"), "{all}");
    assert!(all.contains("pub enum Choice { A, B { x: u32 } }"), "{all}");
    assert!(all.contains("#[doc(hidden)] pub fn stage()"), "{all}");
    assert!(all.contains("\npub fn layer()"), "{all}");
    for absent in ["private", "secret", "helper", "internal", "Docs", "width"] {
        assert!(!all.contains(absent), "{absent} leaked into the API: {all}");
    }
}
