//! The `kmod` rows' tests through Rhai.

pub(crate) mod tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// One call of each function of this file, for
    /// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(crate) const SAMPLES: &[&str] = &[
        r#"kmod::blacklist("nouveau")"#,
        r#"kmod::blacklist("nouveau", #{disable: true})"#,
        r#"kmod::unblacklist("floppy")"#,
        r#"kmod::unblacklist("floppy", #{file: "floppy"})"#,
        r#"kmod::options("nvidia", "a=1")"#,
        r#"kmod::options("nvidia", #{a: 1}, #{file: "nv"})"#,
        r#"kmod::remove_options("old")"#,
        r#"kmod::remove_options("old", #{file: "old"})"#,
        r#"kmod::load_at_boot("nvidia_uvm")"#,
        r#"kmod::load_at_boot("nvidia_uvm", #{file: "nvidia"})"#,
        r#"kmod::unload_at_boot("old")"#,
        r#"kmod::unload_at_boot("old", #{file: "old"})"#,
        r#"kmod::loaded("nvidia")"#,
        r#"kmod::load("nvidia")"#,
        r#"kernel::running()"#,
        r#"kernel::installed()"#,
        r#"kernel::default_release()"#,
        r#"kernel::set_default("6.1.0-test")"#,
        r#"kernel::boot_into("6.1.0-test")"#,
        r#"dkms::status()"#,
        r#"gpu::list()"#,
        r#"gpu::driver_version()"#,
        r#"gpu::count()"#,
    ];

    #[test]
    fn kmod_functions_all_modes_from_rhai() {
        let t = TestHost::new();
        t.install_sh();
        t.file("/etc/os-release", "ID=ubuntu\n");
        t.file("/proc/modules", "");
        t.stub("update-initramfs", ":");
        t.stub("modprobe", r#"echo "$1 1 0 - Live 0x0" >> /proc/modules"#);
        let plan = all_modes(
            &t,
            &[
                r#"kmod::blacklist("nouveau", #{disable: true})"#,
                r#"kmod::options("nouveau", #{modeset: 0})"#,
                r#"kmod::options("nvidia", "NVreg_PreserveVideoMemoryAllocations=1", #{file: "nvidia-pm"})"#,
                r#"kmod::load_at_boot("nvidia_uvm", #{file: "nvidia"})"#,
                r#"kmod::load("nvidia_uvm")"#,
            ],
        );
        let actions: Vec<&str> = plan.action_summaries();
        assert_eq!(actions, ["update-initramfs -u"]);
        assert_eq!(
            t.read("/etc/modprobe.d/nouveau.conf"),
            "options nouveau modeset=0\n"
        );
        assert_eq!(
            t.read("/etc/modprobe.d/nvidia-pm.conf"),
            "options nvidia NVreg_PreserveVideoMemoryAllocations=1\n"
        );
        assert_eq!(t.read("/etc/modules-load.d/nvidia.conf"), "nvidia_uvm\n");
        assert_eq!(t.calls(), ["modprobe nvidia_uvm", "update-initramfs -u"]);
    }

    /// A map of module options must render `key=value` words modprobe reads back as written: a
    /// key that is empty or has `=` or blanks, or a value with blanks, is an error naming the
    /// option (they became `options nouveau =1` or `options nouveau a=x y`, which modprobe
    /// parses as other parameters). Nothing is written.
    #[test]
    fn kmod_options_map_rejects_keys_and_values_that_are_not_one_word() {
        let t = TestHost::new();
        for (src, want) in [
            (
                r#"kmod::options("nouveau", #{"": 1})"#,
                "main.rhai:1:7: kmod::options: option key \"\" must be a non-empty word without `=` or blanks",
            ),
            (
                r#"kmod::options("nouveau", #{"a b": 1})"#,
                "main.rhai:1:7: kmod::options: option key \"a b\" must be a non-empty word without `=` or blanks",
            ),
            (
                r#"kmod::options("nouveau", #{a: "x y"})"#,
                "main.rhai:1:7: kmod::options: option a: value \"x y\" must be one word without blanks",
            ),
        ] {
            let r = run(&t, ExecMode::Apply, src);
            assert_eq!(r.error(), want, "{src}");
        }
        assert!(!t.p("/etc/modprobe.d").exists());
    }
}

mod kernel_tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// An Ubuntu root with two kernels, the stock `GRUB_DEFAULT=0`, and grub stubs: the
    /// `grub-set-default` stub writes the grub environment block as grub-editenv does.
    pub(super) fn grub_root() -> TestHost {
        let t = TestHost::new();
        t.install_sh();
        t.file(
            "/etc/os-release",
            "NAME=\"Ubuntu\"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"24.04\"\n",
        );
        t.file(
            "/etc/default/grub",
            "GRUB_DEFAULT=0\nGRUB_TIMEOUT=0\nGRUB_DISTRIBUTOR=`( . /etc/os-release; echo ${NAME:-Ubuntu} ) 2>/dev/null || echo Ubuntu`\n",
        );
        t.file("/boot/vmlinuz-6.8.0-1015-aws", "");
        t.file("/boot/vmlinuz-6.8.0-1021-aws", "");
        t.file("/usr/lib/modules/6.8.0-999-aws/kernel/x.ko", "");
        t.file("/proc/sys/kernel/osrelease", "6.8.0-1021-aws\n");
        t.stub(
            "grub-set-default",
            "printf '# GRUB Environment Block\\nsaved_entry=%s\\n' \"$1\" > /boot/grub/grubenv\nn=0; while [ $n -lt 40 ]; do printf '##########################' >> /boot/grub/grubenv; n=$((n+1)); done",
        );
        t.stub("update-grub", ":");
        std::fs::create_dir_all(t.p("/boot/grub")).unwrap();
        t
    }

    #[test]
    fn kernel_set_default_all_modes() {
        let t = grub_root();
        let r = run(
            &t,
            ExecMode::Plan,
            r#"print([kernel::running(), kernel::installed(), kernel::default_release()]);"#,
        )
        .ok();
        assert_eq!(
            r.stdout(),
            "[\"6.8.0-1021-aws\", [\"6.8.0-1015-aws\", \"6.8.0-1021-aws\"], \"6.8.0-1021-aws\"]\n"
        );
        let src = r#"print(kernel::set_default("6.8.0-1015-aws"));"#;
        let before = snapshot(&t);
        let plan = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(plan.stdout(), "true\n");
        let summaries: Vec<&str> = plan.report.change_summaries();
        assert_eq!(
            summaries,
            [
                "update /etc/default/grub",
                "grub default: 6.8.0-1021-aws -> 6.8.0-1015-aws"
            ]
        );
        let actions: Vec<&str> = plan.report.action_summaries();
        assert_eq!(actions, ["update-grub"]);
        let check = run(&t, ExecMode::Check, src).ok();
        assert_eq!(check.report.drift().len(), 2);
        assert_eq!(snapshot(&t), before, "a plan or check changed the root");
        assert!(t.calls().is_empty());
        assert_eq!(run(&t, ExecMode::Apply, src).ok().stdout(), "true\n");
        assert_eq!(
            t.read("/etc/default/grub").lines().next(),
            Some("GRUB_DEFAULT=saved")
        );
        assert_eq!(
            t.calls(),
            [
                "grub-set-default Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-1015-aws",
                "update-grub "
            ]
        );
        t.clear_calls();
        assert_eq!(run(&t, ExecMode::Apply, src).ok().stdout(), "false\n");
        let check = run(&t, ExecMode::Check, src).ok();
        assert!(check.report.drift().is_empty());
        assert!(t.calls().is_empty());
        // Another release is a change again; the defaults file is already right.
        t.clear_calls();
        let r = run(
            &t,
            ExecMode::Apply,
            r#"print([kernel::set_default("6.8.0-1021-aws"), kernel::default_release()]);"#,
        )
        .ok();
        assert_eq!(r.stdout(), "[true, \"6.8.0-1021-aws\"]\n");
        assert_eq!(
            t.calls(),
            ["grub-set-default Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-1021-aws"]
        );
    }

    /// The planned default is what `kernel::default_release()` answers later in the same
    /// plan, and `boot_into` requests the reboot only for another kernel than the running one.
    #[test]
    fn kernel_boot_into_plans_the_reboot() {
        let t = grub_root();
        let r = run(
            &t,
            ExecMode::Plan,
            r#"print([kernel::boot_into("6.8.0-1015-aws"), kernel::default_release()]);"#,
        )
        .ok();
        assert_eq!(r.stdout(), "[true, \"6.8.0-1015-aws\"]\n");
        assert_eq!(r.report.interrupts.len(), 1, "{:?}", r.report);
        // The running kernel, grub's default only as the newest (entry 0): pinned, no
        // reboot; then nothing to do.
        let src = r#"print(kernel::boot_into("6.8.0-1021-aws"));"#;
        let r = run(&t, ExecMode::Apply, src).ok();
        assert_eq!(r.stdout(), "true\n");
        assert!(r.report.interrupts.is_empty());
        assert_eq!(
            t.calls(),
            [
                "grub-set-default Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-1021-aws",
                "update-grub "
            ]
        );
        let r = run(&t, ExecMode::Apply, src).ok();
        assert_eq!(r.stdout(), "false\n");
        assert!(r.report.interrupts.is_empty());
    }

    #[test]
    fn kernel_set_default_refuses_what_it_cannot_do() {
        let t = grub_root();
        let before = snapshot(&t);
        for (src, want) in [
            (
                r#"kernel::set_default("6.9.0-1-aws")"#,
                "main.rhai:1:9: kernel::set_default: invalid kernel release: \"6.9.0-1-aws\" is not installed (installed: 6.8.0-1015-aws, 6.8.0-1021-aws)",
            ),
            (
                r#"kernel::set_default("6.8.0-999-aws")"#,
                "main.rhai:1:9: kernel::set_default: invalid kernel release: \"6.8.0-999-aws\" is not installed (installed: 6.8.0-1015-aws, 6.8.0-1021-aws)",
            ),
            (
                r#"kernel::set_default("../x")"#,
                "main.rhai:1:9: kernel::set_default: invalid kernel release: \"../x\" (a release as `uname -r` prints it, like \"6.8.0-1015-aws\")",
            ),
        ] {
            assert_eq!(run(&t, ExecMode::Apply, src).error(), want, "{src}");
        }
        t.file("/etc/default/grub.d/90-x.cfg", "GRUB_DEFAULT=\"1>2\"\n");
        assert_eq!(
            run(&t, ExecMode::Apply, r#"print(kernel::default_release())"#)
                .ok()
                .stdout(),
            "\n"
        );
        std::fs::remove_file(t.p("/etc/default/grub.d/90-x.cfg")).unwrap();
        t.file("/etc/default/grub.d/90-x.cfg", "GRUB_DEFAULT=2\n");
        assert_eq!(
            run(
                &t,
                ExecMode::Apply,
                r#"kernel::set_default("6.8.0-1015-aws")"#
            )
            .error(),
            "main.rhai:1:9: kernel::set_default: invalid grub default: /etc/default/grub.d/90-x.cfg sets GRUB_DEFAULT=2, which overrides GRUB_DEFAULT=saved in /etc/default/grub: remove it there first"
        );
        std::fs::remove_file(t.p("/etc/default/grub.d/90-x.cfg")).unwrap();
        std::fs::remove_dir(t.p("/etc/default/grub.d")).unwrap();
        assert_eq!(snapshot(&t), before);
        assert!(t.calls().is_empty());
    }

    /// The forms of `GRUB_DEFAULT` and `saved_entry` hosts have.
    #[test]
    fn kernel_default_reads_the_grub_forms() {
        let t = grub_root();
        for (grub_default, grubenv, want) in [
            ("0", None, "\"6.8.0-1021-aws\""),
            (
                "\"Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-1015-aws\"",
                None,
                "\"6.8.0-1015-aws\"",
            ),
            ("saved", None, "\"6.8.0-1021-aws\""),
            (
                "saved",
                Some("gnulinux-advanced-0e1f>gnulinux-6.8.0-1015-aws-advanced-0e1f"),
                "\"6.8.0-1015-aws\"",
            ),
            ("3", None, ""),
        ] {
            t.file(
                "/etc/default/grub",
                &format!("GRUB_DEFAULT={grub_default}\n"),
            );
            let _ = std::fs::remove_file(t.p("/boot/grub/grubenv"));
            if let Some(e) = grubenv {
                let mut block = format!("# GRUB Environment Block\nsaved_entry={e}\n");
                block.push_str(&"#".repeat(1024 - block.len()));
                t.file("/boot/grub/grubenv", &block);
            }
            let r = run(&t, ExecMode::Plan, "print(kernel::default_release())").ok();
            let want = want.trim_matches('"');
            assert_eq!(r.stdout().trim_end(), want, "{grub_default} {grubenv:?}");
        }
        t.file("/boot/grub/grubenv", "saved_entry=0\n");
        t.file("/etc/default/grub", "GRUB_DEFAULT=saved\n");
        assert_eq!(
            run(&t, ExecMode::Plan, "kernel::default_release()").error(),
            "main.rhai:1:9: kernel::default_release: invalid grub environment block: /boot/grub/grubenv does not start with \"# GRUB Environment Block\""
        );
    }
}

mod kernel_undo_tests {
    use crate::host::ExecMode;
    use crate::host::kernel::boot;

    /// A failed step puts `/etc/default/grub` back, drops the deferred `update-grub`, and
    /// lists the grub default the tool already wrote as not undone.
    #[test]
    fn failed_step_undoes_the_grub_file_and_lists_the_default() {
        let t = super::kernel_tests::grub_root();
        let before = t.read("/etc/default/grub");
        let mut h = t.host_with(ExecMode::Apply, |o| o.undo = Some("step".into()));
        assert!(boot::set_default(&mut h, "6.8.0-1015-aws").unwrap());
        let (_, undone, result) = h.fail_with_report();
        result.unwrap();
        assert_eq!(
            undone.not_undone,
            ["grub default: 6.8.0-1021-aws -> 6.8.0-1015-aws"]
        );
        assert_eq!(t.read("/etc/default/grub"), before);
        assert_eq!(
            t.calls(),
            ["grub-set-default Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-1015-aws"]
        );
    }
}

mod dkms_tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// A tree as dkms 3 leaves it: nvidia 550 installed for one kernel and built for
    /// another, an older version only added, a build in progress ignored.
    #[test]
    fn dkms_status_reads_the_tree() {
        let t = TestHost::new();
        let m = t.p("/var/lib/dkms/nvidia");
        for d in [
            "550.54.15/6.8.0-1015-aws/x86_64/module",
            "550.54.15/6.8.0-1021-aws/x86_64/module",
            "550.54.15/build",
            "535.183.01",
        ] {
            std::fs::create_dir_all(m.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("/usr/src/nvidia-550.54.15", m.join("550.54.15/source"))
            .unwrap();
        std::os::unix::fs::symlink(
            "550.54.15/6.8.0-1015-aws/x86_64",
            m.join("kernel-6.8.0-1015-aws-x86_64"),
        )
        .unwrap();
        let src = r#"for e in dkms::status() { print(`${e.name} ${e.version} ${e.kernel} ${e.arch} ${e.state}`); }"#;
        let r = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(
            r.stdout(),
            "nvidia 535.183.01   added\nnvidia 550.54.15 6.8.0-1015-aws x86_64 installed\nnvidia 550.54.15 6.8.0-1021-aws x86_64 built\n"
        );
        let empty = TestHost::new();
        assert_eq!(
            run(&empty, ExecMode::Apply, "print(dkms::status())")
                .ok()
                .stdout(),
            "[]\n"
        );
    }
}

mod gpu_tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// The driver's `/proc` files of two GPUs (as the 550 driver writes them).
    fn proc_gpus(t: &TestHost) {
        t.file(
            "/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n",
        );
        for (bus, uuid) in [
            ("0000:18:00.0", "GPU-5ab1c2d3-0000-1111-2222-333344445555"),
            ("0000:2a:00.0", "GPU-6bc2d3e4-0000-1111-2222-333344445555"),
        ] {
            t.file(
                &format!("/proc/driver/nvidia/gpus/{bus}/information"),
                &format!("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t {uuid}\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {bus}\nDevice Minor: \t 0\nGPU Excluded:\t No\n"),
            );
        }
    }

    const SRC: &str = r#"print([gpu::count(), gpu::driver_version()]); for g in gpu::list() { print(`${g.index}|${g.name}|${g.uuid}|${g.pci_bus}|${g.driver_version}|${g.memory_mib}|${g.mig_mode}`); }"#;

    /// nvidia-smi's CSV when the root has it (the recording stub sees exactly the query);
    /// the `/proc` files without it or when it fails; nothing without a driver.
    #[test]
    fn gpu_list_from_nvidia_smi_then_proc() {
        let t = TestHost::new();
        t.install_sh();
        assert_eq!(run(&t, ExecMode::Plan, SRC).ok().stdout(), "[0, ()]\n");
        proc_gpus(&t);
        let from_proc = "[2, \"550.54.15\"]\n\
            0|NVIDIA H100 80GB HBM3|GPU-5ab1c2d3-0000-1111-2222-333344445555|0000:18:00.0|550.54.15||\n\
            1|NVIDIA H100 80GB HBM3|GPU-6bc2d3e4-0000-1111-2222-333344445555|0000:2a:00.0|550.54.15||\n";
        assert_eq!(run(&t, ExecMode::Plan, SRC).ok().stdout(), from_proc);
        t.stub(
            "nvidia-smi",
            r#"printf '0, NVIDIA H100 80GB HBM3, GPU-5ab1c2d3-0000-1111-2222-333344445555, 00000000:18:00.0, 550.54.15, 81559, Disabled\n1, NVIDIA H100 80GB HBM3, GPU-6bc2d3e4-0000-1111-2222-333344445555, 00000000:2A:00.0, 550.54.15, 81559, [N/A]\n'"#,
        );
        for mode in [ExecMode::Plan, ExecMode::Check, ExecMode::Apply] {
            assert_eq!(
                run(&t, mode, SRC).ok().stdout(),
                "[2, \"550.54.15\"]\n\
                 0|NVIDIA H100 80GB HBM3|GPU-5ab1c2d3-0000-1111-2222-333344445555|0000:18:00.0|550.54.15|81559|Disabled\n\
                 1|NVIDIA H100 80GB HBM3|GPU-6bc2d3e4-0000-1111-2222-333344445555|0000:2a:00.0|550.54.15|81559|\n"
            );
        }
        assert_eq!(
            t.calls()[0],
            "nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,mig.mode.current --format=csv,noheader,nounits"
        );
        // A failing nvidia-smi (driver not talking): the /proc files answer.
        t.stub(
            "nvidia-smi",
            "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9",
        );
        assert_eq!(run(&t, ExecMode::Plan, SRC).ok().stdout(), from_proc);
        t.stub("nvidia-smi", "echo 'garbage'");
        assert_eq!(
            run(&t, ExecMode::Plan, "gpu::list()").error(),
            "main.rhai:1:6: gpu::list: invalid nvidia-smi output: fewer than 7 fields: \"garbage\" (expected index,name,uuid,pci.bus_id,driver_version,memory.total,mig.mode.current)"
        );
    }
}
