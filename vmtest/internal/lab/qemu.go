package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RunSpec says what to run in a guest.
type RunSpec struct {
	Image   Image
	Command []string      // argv run by the guest's shell
	Dir     string        // working directory; must lie inside a share
	Env     []string      // KEY=VALUE pairs exported before the command
	Shares  []string      // host directories mounted at the same path in the guest
	Stdout  io.Writer     // the command's stdout and stderr
	Timeout time.Duration // whole boot-run-poweroff; zero means 10 minutes
	Memory  string        // QEMU -m, default 2G
	CPUs    int           // QEMU -smp, default 2 (1 with ICount)
	// ICount, when positive, runs TCG with -icount shift=ICount: guest time
	// is the number of instructions executed (2^ICount ns each), all vCPUs
	// on one host thread, so timings in the guest count work, not the
	// host's load. For benchmarks; much slower than plain TCG.
	ICount int
	RunDir string // parent of the per-run directory
	Keep   bool   // keep the run directory (console.log) on success
	// System, when set, boots the system guest (systemd on a root disk)
	// instead of the initramfs guest; the command may reboot it
	// (system-run.sh).
	System *System
	// OneThread runs the vCPUs on one host thread (single-threaded TCG),
	// so that the guest takes one CPU of the lab's budget and another
	// guest can run beside it. No effect under KVM.
	OneThread bool
	// HostCPUs is how many host CPUs the lab's guests may use at once
	// (the lab's CPU budget, shared by every vmlab on the machine through
	// lock files in RunDir); zero means the machine's (runtime.NumCPU).
	HostCPUs int
	// Stats, when not nil, receives what the run cost.
	Stats *RunStats
}

// RunStats is what one Run cost, for the lab's time table.
type RunStats struct {
	// Threads is how many host threads run the guest's vCPUs: 1 under
	// single-threaded TCG (icount, serialTCG), else the vCPUs. The run
	// took as many CPUs of the lab's budget.
	Threads int
	// Queued is how long the run waited for its CPUs of the budget: Run
	// adds its own wait to what the caller set (vmlab jobs: the wait for
	// the jobs before it).
	Queued time.Duration
	// Wall is QEMU's time, every boot's; Boot the time from QEMU's start
	// to the command's start, summed over boots.
	Wall, Boot time.Duration
	// CPU is the user and system CPU time QEMU used, every boot's: with
	// Wall and Threads, how busy the guest kept its host threads.
	CPU   time.Duration
	Boots int
}

// exitMarker ends the guest's output; its number is the command's status.
const exitMarker = "vmtest-exit-status: "

// startMarker is the guest init's line just before it runs the command.
const startMarker = "vmtest-command-start"

// Run boots spec.Image under QEMU, runs the command and returns its exit
// status. An error means the guest did not get to report one.
func Run(ctx context.Context, spec RunSpec) (int, error) {
	if spec.Timeout == 0 {
		spec.Timeout = 10 * time.Minute
	}
	if spec.Memory == "" {
		spec.Memory = "2G"
	}
	spec.CPUs = spec.vCPUs()
	if err := os.MkdirAll(spec.RunDir, 0o755); err != nil {
		return 0, err
	}
	// Guests share the machine's CPUs by a budget: each takes as many as
	// host threads run its vCPUs, and waits until they are free. A guest
	// never runs on fewer host CPUs than it has vCPU threads: TCG guests
	// that share CPUs slow each other down enough to break timing-sensitive
	// lab tests.
	accel := accelArgs(spec.ICount, spec.Image.Kernel, spec.OneThread)
	threads := hostThreads(accel, spec.CPUs)
	budget := Budget(spec.HostCPUs)
	queued := time.Now()
	unlock, err := takeCPUs(ctx, spec.RunDir, min(threads, budget), budget)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if spec.Stats != nil {
		*spec.Stats = RunStats{Threads: threads, Queued: spec.Stats.Queued + time.Since(queued)}
	}
	runDir, err := os.MkdirTemp(spec.RunDir, "run-")
	if err != nil {
		return 0, err
	}
	keep := spec.Keep
	defer func() {
		if !keep {
			os.RemoveAll(runDir)
		}
	}()

	var script strings.Builder
	script.WriteString("cd " + shellQuote(spec.Dir) + " || exit 125\n")
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		script.WriteString("export " + k + "=" + shellQuote(v) + "\n")
	}
	quoted := make([]string, len(spec.Command))
	for i, a := range spec.Command {
		quoted[i] = shellQuote(a)
	}
	script.WriteString(strings.Join(quoted, " ") + "\n")
	if err := os.WriteFile(filepath.Join(runDir, "cmd"), []byte(script.String()), 0o644); err != nil {
		return 0, err
	}

	initrd, cmdline := spec.Image.Initramfs, "console=ttyS0 panic=-1 oops=panic quiet loglevel=4"
	var disk []string
	if spec.System != nil {
		overlay, err := systemOverlay(ctx, spec.System.Root, runDir)
		if err != nil {
			return 0, err
		}
		initrd = spec.System.Initramfs
		cmdline += " systemd.show_status=false"
		disk = []string{
			// unsafe: the overlay is the run's alone and thrown away.
			"-drive", "file=" + overlay + ",format=qcow2,if=virtio,cache=unsafe",
			"-virtfs", "local,path=" + spec.System.Modules + ",mount_tag=vmtest_modules,security_model=none,readonly=on,multidevs=remap,id=vmtest_modules",
		}
	}
	// -no-reboot: a guest that reboots (a panic, or the system guest when
	// its command asks) ends QEMU; Run boots it again when asked.
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-nic", "none",
		"-m", spec.Memory, "-smp", strconv.Itoa(spec.CPUs),
		"-kernel", spec.Image.Vmlinuz, "-initrd", initrd, "-append", cmdline,
		"-serial", "file:" + filepath.Join(runDir, "console.log"),
		"-chardev", "stdio,id=out,signal=off", "-serial", "chardev:out",
		// A PCI NIC for the reset tests' PCI paths (unbind/bind, function
		// reset), with no network behind it: a NIC device without a
		// -netdev peer is accepted ("nic e1000e.0 has no peer" is only a
		// warning) and its frames go nowhere, so nothing leaves the guest
		// and -nic none still holds. It sits alone behind a PCI bridge so
		// the kernel can reset it with a secondary bus reset ("bus" in
		// reset_method); its fixed MAC gives rxe on it a fixed node GUID.
		"-device", "pci-bridge,id=labbr1,chassis_nr=1",
		"-device", "e1000e,bus=labbr1,addr=1,mac=" + LabNICMAC,
	}
	args = append(args, disk...)
	args = append(args, accel...)
	var mounts strings.Builder
	shares := append([]string{runDir}, dedupShares(spec.Shares)...)
	for i, dir := range shares {
		tag := "vmtest_run"
		if i > 0 {
			tag = fmt.Sprintf("vmtest_s%d", i)
			fmt.Fprintf(&mounts, "%s %s\n", tag, dir)
		}
		args = append(args, "-virtfs",
			fmt.Sprintf("local,path=%s,mount_tag=%s,security_model=none,multidevs=remap,id=%s", dir, tag, tag))
	}
	if err := os.WriteFile(filepath.Join(runDir, "mounts"), []byte(mounts.String()), 0o644); err != nil {
		return 0, err
	}

	ctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	boots := 1
	if err := os.WriteFile(filepath.Join(runDir, "boot"), []byte("1\n"), 0o644); err != nil {
		return 0, err
	}
	for attempt := 1; ; attempt++ {
		res := boot(ctx, spec, args, runDir)
		if st := spec.Stats; st != nil {
			st.Boots++
			st.Wall += res.wall
			st.Boot += res.boot
			st.CPU += res.cpu
		}
		if res.ok {
			return res.status, nil
		}
		if spec.System != nil && ctx.Err() == nil && os.Remove(filepath.Join(runDir, "reboot")) == nil {
			// The command asked for a reboot (system-run.sh): the same
			// disk boots again and the command runs again.
			if boots++; boots > maxBoots {
				keep = true
				return 0, fmt.Errorf("lab: the command asked for more than %d boots; console: %s", maxBoots,
					filepath.Join(runDir, "console.log"))
			}
			if err := os.WriteFile(filepath.Join(runDir, "boot"), []byte(strconv.Itoa(boots)+"\n"), 0o644); err != nil {
				return 0, err
			}
			_ = os.Rename(filepath.Join(runDir, "console.log"), // kept for a look; the next boot writes a new one
				filepath.Join(runDir, fmt.Sprintf("console-boot%d.log", boots-1)))
			attempt = 0
			continue
		}
		keep = true
		console := filepath.Join(runDir, "console.log")
		if ctx.Err() != nil {
			return 0, fmt.Errorf("lab: guest timed out after %s; console: %s\n%s", spec.Timeout,
				console, consoleTail(runDir, 20))
		}
		if res.started || attempt == bootAttempts {
			return 0, fmt.Errorf("lab: guest ended without an exit status (qemu: %w %s); console: %s\n%s",
				res.runErr, res.qemuErr, console, consoleTail(runDir, 30))
		}
		// The guest never got to the command: its kernel died or stalled
		// while booting. Under TCG this happens now and then to a kernel
		// that boots fine otherwise (seen: a 7.x guest's timer interrupt
		// oopsing on code being patched by another vCPU), so boot it again
		// and keep the failed boot's console for a look.
		failed := filepath.Join(runDir, fmt.Sprintf("console-boot%d.log", attempt))
		if err := os.Rename(console, failed); err != nil {
			failed = console // the next boot writes over it
		}
		fmt.Fprintf(os.Stderr, "lab: %s guest did not reach its command (boot %d of %d: %s); booting again; console: %s\n%s\n",
			spec.Image.Kernel, attempt, bootAttempts, res.why, failed, lastLinesRaw(readFile(failed), 8))
	}
}

// maxBoots is how many times one run may boot the system guest: its
// first boot and the reboots its command asks for.
const maxBoots = 16

// bootAttempts is how many times Run boots a guest that dies or stalls
// before its command starts. A failure after the command started is
// never retried: that is the test's result.
const bootAttempts = 3

// bootTimeout bounds the time from QEMU's start to the command's start.
// A lab guest gets there in well under a minute under TCG on a loaded
// machine; a guest still booting after this long has stalled.
const bootTimeout = 4 * time.Minute

// bootResult is what one boot of a guest came to.
type bootResult struct {
	status  int
	ok      bool   // the guest reported status
	started bool   // the guest's init started the command
	why     string // for a boot that did not start the command
	runErr  error
	qemuErr string
	// wall is QEMU's run, boot its part before the command started (all
	// of it when it never did), cpu QEMU's user and system CPU time.
	wall, boot, cpu time.Duration
}

// boot runs QEMU once and waits for it to end. It stops QEMU when the
// guest has not started the command within bootTimeout.
func boot(ctx context.Context, spec RunSpec, args []string, runDir string) bootResult {
	os.Remove(filepath.Join(runDir, "exit-status"))
	bootCtx, stop := context.WithCancel(ctx)
	defer stop()
	cmd := exec.CommandContext(bootCtx, "qemu-system-x86_64", args...)
	filter := &markerFilter{w: spec.Stdout, started: make(chan struct{})}
	cmd.Stdout = filter
	var qemuErr bytes.Buffer
	cmd.Stderr = &qemuErr
	cmd.Stdin = nil
	stalled := false
	timer := time.AfterFunc(bootTimeout, func() {
		select {
		case <-filter.started:
		default:
			stalled = true
			stop()
		}
	})
	began := time.Now()
	runErr := cmd.Run()
	timer.Stop()
	filter.flush()

	res := bootResult{runErr: runErr, qemuErr: strings.TrimSpace(qemuErr.String()), wall: time.Since(began)}
	if ps := cmd.ProcessState; ps != nil {
		res.cpu = ps.UserTime() + ps.SystemTime()
	}
	res.boot = res.wall
	select {
	case <-filter.started:
		res.started = true
		res.boot = filter.startedAt.Sub(began) // written before Run returned (its output copied)
	default:
	}
	res.status, res.ok = readStatus(filepath.Join(runDir, "exit-status"))
	if !res.ok {
		res.status, res.ok = filter.status, filter.found
	}
	switch {
	case stalled:
		res.why = fmt.Sprintf("no start after %s", bootTimeout)
	case strings.Contains(readFile(filepath.Join(runDir, "console.log")), "Kernel panic"):
		res.why = "kernel panic"
	default:
		res.why = "QEMU exited"
	}
	return res
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func readStatus(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

func consoleTail(runDir string, n int) string {
	b, _ := os.ReadFile(filepath.Join(runDir, "console.log"))
	return lastLinesRaw(string(b), n)
}

func lastLinesRaw(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// dedupShares drops shares that lie inside another share.
func dedupShares(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		d = filepath.Clean(d)
		inside := slices.ContainsFunc(dirs, func(o string) bool {
			o = filepath.Clean(o)
			return o != d && strings.HasPrefix(d, o+"/")
		})
		if !inside && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// accelArgs picks KVM only when a stock kernel can run on it (kvm_intel or
// kvm_amd loaded; kvm_pvm cannot), else TCG. VMTEST_ACCEL overrides. A
// positive icount asks for TCG in instruction-counting mode (single
// threaded, as QEMU requires), whatever is available; oneThread asks for
// single-threaded TCG.
func accelArgs(icount int, kernel string, oneThread bool) []string {
	if icount > 0 {
		// sleep=off: idle guest time is skipped, not waited out.
		return []string{"-accel", "tcg,thread=single", "-cpu", "max", "-icount", fmt.Sprintf("shift=%d,sleep=off", icount)}
	}
	accel := os.Getenv("VMTEST_ACCEL")
	if accel == "" {
		accel = "tcg"
		for _, m := range []string{"kvm_intel", "kvm_amd"} {
			if _, err := os.Stat("/sys/module/" + m); err == nil {
				if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err == nil {
					_ = f.Close() // only opened to see whether it can be
					accel = "kvm"
				}
			}
		}
	}
	if accel == "kvm" {
		return []string{"-accel", "kvm", "-cpu", "host"}
	}
	if why := serialTCG[kernel]; why != "" || oneThread {
		return []string{"-accel", "tcg,thread=single", "-cpu", "max"}
	}
	return []string{"-accel", "tcg,thread=multi", "-cpu", "max"}
}

// serialTCG names the kernels whose guests run their vCPUs on one host
// thread under TCG (still two vCPUs, taking turns), and why. 7.x (6.16's
// rewrite of x86 text patching, smp_text_poke_*) dies now and then under
// multi-threaded TCG in its int3 handler while code is patched on the other
// vCPU: seen in a CI boot (static keys, ktime_get_update_offsets_now) and
// at an fentry attach (ib_destroy_qp_user+0x5, "Oops: int3"); 6.1 and 6.12
// never did in the same tests.
var serialTCG = map[string]string{
	"7.x": "int3 oopses while code is patched across vCPUs under multi-threaded TCG",
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// markerFilter passes the guest's output through line by line and takes the
// exit marker line out of it.
type markerFilter struct {
	w      io.Writer
	buf    []byte
	status int
	found  bool
	// started, when not nil, is closed at the start marker, at startedAt.
	started   chan struct{}
	startedAt time.Time
}

func (m *markerFilter) Write(p []byte) (int, error) {
	m.buf = append(m.buf, p...)
	for {
		i := bytes.IndexByte(m.buf, '\n')
		if i < 0 {
			break
		}
		m.line(m.buf[:i+1])
		m.buf = m.buf[i+1:]
	}
	return len(p), nil
}

func (m *markerFilter) line(l []byte) {
	s := strings.TrimRight(string(l), "\r\n")
	if s == startMarker {
		if m.started != nil {
			select {
			case <-m.started:
			default:
				m.startedAt = time.Now()
				close(m.started)
			}
		}
		return
	}
	// The marker follows the command's last byte, which need not be a newline.
	if i := strings.LastIndex(s, exitMarker); i >= 0 {
		if n, err := strconv.Atoi(s[i+len(exitMarker):]); err == nil {
			m.status, m.found = n, true
			if i > 0 && m.w != nil {
				_, _ = m.w.Write([]byte(s[:i] + "\n")) // the log is a copy: the run goes on without it
			}
			return
		}
	}
	if m.w != nil {
		_, _ = m.w.Write(l) // the log is a copy: the run goes on without it
	}
}

func (m *markerFilter) flush() {
	if len(m.buf) > 0 {
		m.line(m.buf)
		m.buf = nil
	}
}

// LabNICMAC is the MAC address of the guest's emulated PCI NIC (e1000e).
const LabNICMAC = "02:00:00:00:03:01"

// ErrNotBuilt is returned when a kernel's image has not been built yet.
var ErrNotBuilt = errors.New("lab image not built (run: make lab)")

// vCPUs is the guest's QEMU -smp: spec.CPUs, else 2 (1 with ICount).
func (spec RunSpec) vCPUs() int {
	switch {
	case spec.CPUs > 0:
		return spec.CPUs
	case spec.ICount > 0:
		// One timeline for all vCPUs under icount anyway, and Debian's 6.1
		// never brings up a second one there (it hangs in SMP boot).
		return 1
	default:
		return 2
	}
}

// HostThreads is how many host threads run the guest's vCPUs, and so how
// many CPUs of the lab's budget Run takes for it.
func (spec RunSpec) HostThreads() int {
	return hostThreads(accelArgs(spec.ICount, spec.Image.Kernel, spec.OneThread), spec.vCPUs())
}

// Budget is the lab's budget of host CPUs for a RunSpec.HostCPUs of n:
// n, or the machine's CPUs when n is not positive.
func Budget(n int) int {
	if n > 0 {
		return n
	}
	return runtime.NumCPU()
}

// hostThreads is how many host threads run a guest's vCPUs under accel
// (accelArgs): one under single-threaded TCG, else one a vCPU.
func hostThreads(accel []string, cpus int) int {
	if slices.Contains(accel, "tcg,thread=single") {
		return 1
	}
	return cpus
}

// takeCPUs takes n of the lab's budget of host CPUs: n of the lock files
// cpu.0 to cpu.(budget-1) in dir, flocked, all at once or none (a guest
// holding some while it waits for more could wait on another that does
// the same). It waits, looking every 200 ms, until ctx ends. Locks die
// with their process, so a killed vmlab frees its CPUs.
func takeCPUs(ctx context.Context, dir string, n, budget int) (func(), error) {
	var files []*os.File
	release := func() {
		for _, f := range files {
			_ = f.Close() // closing the file releases its lock
		}
		files = nil
	}
	for {
		for i := 0; i < budget && len(files) < n; i++ {
			path := filepath.Join(dir, "cpu."+strconv.Itoa(i))
			f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
			if err != nil {
				release()
				return nil, fmt.Errorf("lab: CPU budget: %w", err)
			}
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil {
				files = append(files, f)
				continue
			}
			_ = f.Close() // held by another guest, or the error is returned
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				release()
				return nil, fmt.Errorf("lab: lock %s: %w", path, err)
			}
		}
		if len(files) == n {
			taken := files
			return func() {
				for _, f := range taken {
					_ = f.Close() // closing the file releases its lock
				}
			}, nil
		}
		release()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lab: waiting for %d of the lab's %d host CPUs: %w", n, budget, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
