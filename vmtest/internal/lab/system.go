package lab

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The system guest is a Debian host as an operator has one: a bookworm
// root with systemd as PID 1, systemd-udevd, and rdma-core with its udev
// rules, rdma-ndd and rdma-hw.target, on an ext4 root disk, booted on a lab
// kernel with the kernel's whole module tree. Tests in it install packages
// with apt and drive services with systemctl, and can reboot it. The
// initramfs guest (Build, init.sh) stays what every other lab test runs in.

// systemPackages are installed into the system root by mmdebstrap, with
// their dependencies, from the Debian archive the host's apt uses.
var systemPackages = []string{
	"systemd", "systemd-sysv", "udev", "dbus", "kmod", "procps", "iproute2",
	// As on any RDMA host: rdma-core's udev rules (60-rdma-persistent-
	// naming.rules), rdma-ndd and rdma-hw.target, the providers, rdma_cm.
	"rdma-core", "ibverbs-providers", "ibverbs-utils", "rdmacm-utils",
	// The DaemonSet's image runs under podman (crun, the OCI runtime).
	"podman", "crun",
}

// systemRootSize is the root disk's size: the root (about 600 MB) and room
// for what tests install and for podman's image store. The image file is
// sparse, and every run writes to an overlay of its own.
const systemRootSize = "3G"

//go:embed system-init.sh
var systemInitScript string

//go:embed system-run.sh
var systemRunScript string

// systemUnit runs the host's command once the system has booted.
const systemUnit = `[Unit]
Description=vmtest: run the host's command, then power off or reboot
After=multi-user.target

[Service]
Type=simple
ExecStart=/usr/local/sbin/vmtest-run
StandardInput=null
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
`

// systemFiles are written into the root after mmdebstrap. A target of ""
// with a mode of 0 is a link to /dev/null: a masked unit.
var systemFiles = []struct {
	path string
	mode os.FileMode
	body string
}{
	{"etc/hostname", 0o644, "vmtest\n"},
	{"etc/hosts", 0o644, "127.0.0.1\tlocalhost\n127.0.1.1\tvmtest\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
	// A fixed machine id: no first-boot setup on any boot.
	{"etc/machine-id", 0o444, "5f1d8b3c9a0e4c7e8d2b6a4f3c1e0d9b\n"},
	{"etc/fstab", 0o644, "/dev/vda / ext4 rw,errors=remount-ro 0 0\n"},
	{"etc/systemd/system/vmtest.service", 0o644, systemUnit},
	{"usr/local/sbin/vmtest-run", 0o755, systemRunScript},
	// No login prompt on the console, no timers that start work of their
	// own while a test runs.
	{"etc/systemd/system/serial-getty@.service", 0, ""},
	{"etc/systemd/system/getty@.service", 0, ""},
	{"etc/systemd/system/apt-daily.timer", 0, ""},
	{"etc/systemd/system/apt-daily-upgrade.timer", 0, ""},
	{"etc/systemd/system/e2scrub_all.timer", 0, ""},
	{"etc/systemd/system/fstrim.timer", 0, ""},
	{"etc/systemd/system/podman-auto-update.timer", 0, ""},
	{"etc/systemd/system/podman-restart.service", 0, ""},
	{"etc/systemd/system/podman-auto-update.service", 0, ""},
	{"etc/systemd/system/e2scrub_reap.service", 0, ""},
}

// systemRecipe fingerprints what goes into the system root, so a change
// rebuilds a cached one.
func systemRecipe() string {
	parts := []string{strings.Join(systemPackages, " "), systemRootSize}
	for _, f := range systemFiles {
		parts = append(parts, f.path, f.mode.String(), f.body)
	}
	return fingerprint(parts...)
}

// SystemRoot returns the system guest's root disk image, building it once
// per cache with mmdebstrap (a few minutes; it downloads about 200 MB).
// The image is never written by a guest: each run boots an overlay of it.
func (b *Builder) SystemRoot(ctx context.Context) (string, error) {
	dir := filepath.Join(b.Cache, "system")
	img := filepath.Join(dir, "root-"+systemRecipe()+".img")
	if _, err := os.Stat(img); err == nil && !b.Refresh {
		return img, nil
	}
	start := time.Now()
	suite := hostCodename("/etc/os-release")
	b.Log.Info("building the system root", "suite", suite, "packages", len(systemPackages))
	uri, keyring, err := hostMirror("/etc/apt")
	if err != nil {
		return "", err
	}
	tree := filepath.Join(dir, "tree")
	if err := os.RemoveAll(tree); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	source := fmt.Sprintf("deb %s %s main", uri, suite)
	if keyring != "" {
		source = fmt.Sprintf("deb [signed-by=%s] %s %s main", keyring, uri, suite)
	}
	if err := runIn(ctx, "", nil, "mmdebstrap", "--quiet", "--mode=root", "--variant=minbase",
		"--include="+strings.Join(systemPackages, ","), suite, tree, source); err != nil {
		return "", fmt.Errorf("lab: system root: %w", err)
	}
	if err := writeSystemFiles(tree); err != nil {
		return "", fmt.Errorf("lab: system root: %w", err)
	}
	// The guest reaches no archive: apt installs only the .debs it is given.
	if err := os.WriteFile(filepath.Join(tree, "etc/apt/sources.list"), nil, 0o644); err != nil {
		return "", err
	}
	part := img + ".part"
	if err := runIn(ctx, "", nil, "mkfs.ext4", "-q", "-F", "-L", "vmtest", "-d", tree, part, systemRootSize); err != nil {
		return "", fmt.Errorf("lab: system root: %w", err)
	}
	if err := os.Rename(part, img); err != nil {
		return "", err
	}
	if err := os.RemoveAll(tree); err != nil {
		return "", err
	}
	old, _ := filepath.Glob(filepath.Join(dir, "root-*.img"))
	for _, o := range old {
		if o != img {
			_ = os.Remove(o) // an older recipe's root; only space is lost if it stays
		}
	}
	b.Log.Info("system root ready", "image", img, "duration_seconds", time.Since(start).Seconds())
	return img, nil
}

// writeSystemFiles writes systemFiles into tree and enables vmtest.service.
func writeSystemFiles(tree string) error {
	for _, f := range systemFiles {
		p := filepath.Join(tree, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		_ = os.Remove(p) // mmdebstrap's own version, if any
		if f.mode == 0 {
			if err := os.Symlink("/dev/null", p); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, f.mode); err != nil { // whatever the umask
			return err
		}
	}
	wants := filepath.Join(tree, "etc/systemd/system/multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return err
	}
	return os.Symlink("/etc/systemd/system/vmtest.service", filepath.Join(wants, "vmtest.service"))
}

// hostCodename is the host's Debian release (VERSION_CODENAME in
// os-release), bookworm when it says none.
func hostCodename(osRelease string) string {
	b, _ := os.ReadFile(osRelease)
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "VERSION_CODENAME="); ok && v != "" {
			return strings.Trim(v, `"`)
		}
	}
	return "bookworm"
}

// System is what RunSpec.System boots: a lab kernel with the system
// guest's initramfs and root disk.
type System struct {
	// Initramfs mounts the root disk and the shares and starts systemd
	// (system-init.sh).
	Initramfs string
	// Modules is the kernel's whole module tree (/lib/modules/RELEASE),
	// shared read-only with the guest.
	Modules string
	// Root is the root disk image; each run boots a copy-on-write
	// overlay of it in its run directory, kept across the run's reboots.
	Root string
}

// systemModules are what the system initramfs loads to mount the root
// disk and the 9p shares. Optional ones are built in on some kernels.
var systemModules = []struct {
	name     string
	optional bool
}{
	{"virtio_pci", true}, {"virtio_blk", false},
	{"crc32c_generic", true}, {"crc32c_intel", true}, {"ext4", false},
	{"9pnet_virtio", false}, {"9p", false},
}

// System returns the system guest for img: its initramfs (built once per
// kernel and cached) and the root disk (SystemRoot).
func (b *Builder) System(ctx context.Context, img Image) (System, error) {
	root, err := b.SystemRoot(ctx)
	if err != nil {
		return System{}, err
	}
	// The kernel's unpacked packages stay beside its image (build).
	release, modRoot, err := kernelRelease(filepath.Join(filepath.Dir(img.Initramfs), "root"))
	if err != nil {
		return System{}, fmt.Errorf("lab: system guest on kernel %s: %w (vmlab build -refresh -kernel %s)", img.Kernel, err, img.Kernel)
	}
	modules := filepath.Join(modRoot, release)
	var names []string
	for _, m := range systemModules {
		names = append(names, m.name)
	}
	dir := filepath.Join(b.Cache, "system", img.Kernel+"-"+fingerprint(img.Release, img.Version, systemInitScript, strings.Join(names, " ")))
	initramfs := filepath.Join(dir, "initramfs.cpio")
	sys := System{Initramfs: initramfs, Modules: modules, Root: root}
	if _, err := os.Stat(initramfs); err == nil && !b.Refresh {
		return sys, nil
	}
	if err := b.buildSystemInitramfs(ctx, dir, img, release, modules); err != nil {
		return System{}, fmt.Errorf("lab: system initramfs for kernel %s: %w", img.Kernel, err)
	}
	return sys, nil
}

// buildSystemInitramfs writes dir/initramfs.cpio: busybox, system-init.sh
// as /init, and the modules of systemModules with what they depend on.
func (b *Builder) buildSystemInitramfs(ctx context.Context, dir string, img Image, release, modules string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	user, err := b.userspace(ctx)
	if err != nil {
		return err
	}
	tree := filepath.Join(dir, "tree")
	if err := copyFile(filepath.Join(user, "usr/bin/busybox"), filepath.Join(tree, "usr/bin/busybox"), 0o755); err != nil {
		return err
	}
	deps, builtin, err := readModuleTables(modules)
	if err != nil {
		return err
	}
	var want []string
	optional := map[string]bool{}
	for _, m := range systemModules {
		want = append(want, m.name)
		optional[m.name] = m.optional
	}
	files, load, err := moduleClosure(deps, builtin, want, optional)
	if err != nil {
		return err
	}
	out := filepath.Join(tree, "usr/lib/modules", release)
	for _, f := range files {
		if err := decompressModule(ctx, filepath.Join(modules, f), filepath.Join(out, stripCompression(f))); err != nil {
			return err
		}
	}
	for _, f := range []string{"modules.order", "modules.builtin", "modules.builtin.modinfo"} {
		if err := copyFile(filepath.Join(modules, f), filepath.Join(out, f), 0o644); err != nil {
			return err
		}
	}
	if err := mergedUsr(tree); err != nil {
		return err
	}
	if err := runIn(ctx, "", nil, "depmod", "-b", tree, release); err != nil {
		return err
	}
	part := filepath.Join(dir, "initramfs.cpio.part")
	if err := writeArchive(part, systemInitScript, img.Kernel, release, load, tree); err != nil {
		return err
	}
	if err := os.RemoveAll(tree); err != nil {
		return err
	}
	return os.Rename(part, filepath.Join(dir, "initramfs.cpio"))
}

// systemOverlay makes the run's root disk: a qcow2 overlay over the cached
// root image, so the run's writes, which persist across its reboots, never
// reach the image.
func systemOverlay(ctx context.Context, root, runDir string) (string, error) {
	overlay := filepath.Join(runDir, "root.qcow2")
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", root, overlay).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("lab: overlay of the system root: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return overlay, nil
}
