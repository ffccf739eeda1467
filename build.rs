//! Records the source revision for `ferry_build_info` and `ferry --version`: `FERRY_REVISION` from the
//! environment (container builds without `.git`), else `git rev-parse --short HEAD`, else "unknown".

fn main() {
    println!("cargo:rerun-if-env-changed=FERRY_REVISION");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    let revision = std::env::var("FERRY_REVISION").ok().filter(|r| !r.is_empty()).or_else(|| {
        let out = std::process::Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    });
    println!("cargo:rustc-env=FERRY_REVISION={}", revision.unwrap_or_else(|| "unknown".into()));
}
