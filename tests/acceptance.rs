use crate::util::*;

#[test]
fn smoke_root() {
    require_root!();
    let t0 = std::time::Instant::now();
    let fr = FakeRoot::new();
    eprintln!("first {:?}", t0.elapsed());
    let t1 = std::time::Instant::now();
    let fr2 = FakeRoot::new();
    eprintln!("second {:?}", t1.elapsed());
    let out = std::process::Command::new("chroot").arg(fr.root()).args(["/bin/bash","-c","echo hi; ls /; touch /t/x; sh -c 'echo sh ok'"]).output().unwrap();
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    drop(fr2);
}
