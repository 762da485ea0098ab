package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/rdmanl"
)

func TestExitCode(t *testing.T) {
	t.Parallel()
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name       string
		ctx        context.Context
		err        error
		want       int
		wantStderr string
	}{
		{name: "success", ctx: t.Context(), err: nil, want: 0},
		{name: "findings", ctx: t.Context(), err: errFindings, want: 1},
		{name: "wrapped findings", ctx: t.Context(), err: fmt.Errorf("qp-leaks: %w", errFindings), want: 1},
		{
			name: "permission from the kernel", ctx: t.Context(),
			err:        &rdmanl.Error{Op: "rename rxe0 to fab0-hca0", Err: syscall.EPERM},
			want:       2,
			wantStderr: "rdmatool: rdmanl: rename rxe0 to fab0-hca0: operation not permitted (run as root or grant CAP_NET_ADMIN)\n",
		},
		{
			name: "a netlink refusal wrapped twice", ctx: t.Context(),
			err:        fmt.Errorf("rename: rxe0 to fab0: %w", fmt.Errorf("step: %w", &rdmanl.Error{Op: "rename rxe0", Err: syscall.EPERM})),
			want:       2,
			wantStderr: "rdmatool: rename: rxe0 to fab0: step: rdmanl: rename rxe0: operation not permitted (run as root or grant CAP_NET_ADMIN)\n",
		},
		{
			name: "no device", ctx: t.Context(),
			err:        &rdmanl.Error{Op: "find device mlx5_9", Err: rdmanl.ErrNoDevice},
			want:       2,
			wantStderr: "rdmatool: rdmanl: find device mlx5_9: no such RDMA device\n",
		},
		{name: "interrupted", ctx: canceled, err: context.Canceled, want: 130, wantStderr: "rdmatool: interrupted\n"},
		{
			name: "interrupted during a dump", ctx: canceled,
			err: &rdmanl.Error{Op: "dump QPs of rxe0", Err: context.Canceled}, want: 130, wantStderr: "rdmatool: interrupted\n",
		},
		{
			// A signal cancels ctx, which unblocks netlink reads by setting a
			// past deadline: the error is then an I/O timeout.
			name: "interrupted, the read ended by a deadline", ctx: canceled,
			err: &rdmanl.Error{Op: "dump QPs of rxe0", Err: os.ErrDeadlineExceeded}, want: 130, wantStderr: "rdmatool: interrupted\n",
		},
		{
			name: "a deadline of the command's own is an error", ctx: t.Context(),
			err:        fmt.Errorf("agent: ask /run/rdmatool/agent.sock: %w", context.DeadlineExceeded),
			want:       2,
			wantStderr: "rdmatool: agent: ask /run/rdmatool/agent.sock: context deadline exceeded\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if got := exitCode(tt.ctx, tt.err, &stderr); got != tt.want {
				t.Errorf("exitCode() = %d, want %d", got, tt.want)
			}
			if diff := cmp.Diff(tt.wantStderr, stderr.String()); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUserMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "plain", err: errors.New("link type \"ib\": only rxe and siw devices can be added"), want: "link type \"ib\": only rxe and siw devices can be added"},
		{name: "netlink permission", err: &rdmanl.Error{Op: "dump MRs of rxe0", Err: syscall.EPERM}, want: "rdmanl: dump MRs of rxe0: operation not permitted (run as root or grant CAP_NET_ADMIN)"},
		{name: "netlink EACCES is a permission error too", err: &rdmanl.Error{Op: "open netlink socket", Err: syscall.EACCES}, want: "rdmanl: open netlink socket: permission denied (run as root or grant CAP_NET_ADMIN)"},
		{name: "no RDMA netlink", err: &rdmanl.Error{Op: "open netlink socket", Err: syscall.EPROTONOSUPPORT},
			want: "rdmanl: open netlink socket: protocol not supported (this kernel has no RDMA netlink: modprobe ib_core, or load an RDMA driver)"},
		{name: "a file's permission is not about capabilities", err: fmt.Errorf("docs: write man pages to /x: %w", &os.PathError{Op: "mkdir", Path: "/x", Err: syscall.EACCES}),
			want: "docs: write man pages to /x: mkdir /x: permission denied"},
		{name: "probes without privilege: one hint, the BPF one", err: fmt.Errorf("bpf: load programs: %w (%w)", bpf.ErrNoPrivilege, syscall.EPERM),
			want: "bpf: load programs: " + bpf.ErrNoPrivilege.Error() + " (operation not permitted) (run as root, or grant CAP_BPF and CAP_PERFMON)"},
		{name: "ib_core not loaded", err: fmt.Errorf("bpf: open: %w", bpf.ErrNoIBCore), want: "bpf: open: ib_core is not loaded (modprobe ib_core, or load an RDMA driver)"},
		{name: "not found", err: fmt.Errorf("docs: %w", os.ErrNotExist), want: "docs: file does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := userMessage(tt.err, func() ibCoreState { return ibCoreModule })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("userMessage() (-want +got):\n%s", diff)
			}
			if n := strings.Count(got, "CAP_"); n > 2 || strings.Contains(got, "CAP_NET_ADMIN") && strings.Contains(got, "CAP_BPF") {
				t.Errorf("hint given %d times: %q", n, got)
			}
		})
	}
}

// runCLI runs rdmatool with args the way main does.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRunVersion(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI(t, "version", "-j")
	if code != 0 || stderr != "" {
		t.Fatalf("rdmatool version -j: exit %d, stderr %q", code, stderr)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var got versionInfo
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode %q: %v", stdout, err)
	}
	want := versionInfo{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("version -j (-want +got):\n%s", diff)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(stdout), &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"version", "go_version", "platform"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("version -j has no %q field: %s", f, stdout)
		}
	}
	if !strings.HasSuffix(stdout, "}\n") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("version -j is not one compact line: %q", stdout)
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		want       int
		wantStdout string   // exact, when set
		wantErr    []string // substrings of the one stderr line
	}{
		{name: "version", args: []string{"version"}, want: 0, wantStdout: fmt.Sprintf("rdmatool %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)},
		{name: "--version", args: []string{"--version"}, want: 0, wantStdout: "rdmatool " + version + "\n"},
		{name: "version -j -p", args: []string{"version", "-j", "-p"}, want: 0, wantStdout: fmt.Sprintf("{\n  \"version\": %q,\n  \"go_version\": %q,\n  \"platform\": \"%s/%s\"\n}\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)},
		{name: "unknown command", args: []string{"bogus"}, want: 2, wantStdout: "", wantErr: []string{`"bogus"`}},
		{name: "unknown flag", args: []string{"version", "--bogus"}, want: 2, wantStdout: "", wantErr: []string{"--bogus"}},
		{name: "extra argument", args: []string{"version", "extra"}, want: 2, wantStdout: "", wantErr: []string{"extra"}},
		{name: "link add of an unknown type", args: []string{"link", "add", "ib0", "type", "ib", "netdev", "eth0"}, want: 2, wantStdout: "", wantErr: []string{`link type "ib"`, "rxe", "siw"}},
		{name: "link add with misplaced words", args: []string{"link", "add", "rxe0", "kind", "rxe", "netdev", "eth0"}, want: 2, wantStdout: "", wantErr: []string{"usage: rdmatool link add NAME type rxe|siw netdev IF"}},
		{name: "link show of port 0", args: []string{"link", "show", "rxe0/0"}, want: 2, wantStdout: "", wantErr: []string{`link "rxe0/0"`, "port must be a number from 1"}},
		{name: "link show without a device", args: []string{"link", "show", "/1"}, want: 2, wantStdout: "", wantErr: []string{`link "/1": no device name`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tt.args...)
			if code != tt.want {
				t.Errorf("rdmatool %s: exit %d, want %d (stderr %q)", strings.Join(tt.args, " "), code, tt.want, stderr)
			}
			if diff := cmp.Diff(tt.wantStdout, stdout); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if tt.wantErr == nil {
				if stderr != "" {
					t.Errorf("stderr = %q, want nothing", stderr)
				}
				return
			}
			if !strings.HasPrefix(stderr, "rdmatool: ") || strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
				t.Errorf("stderr = %q, want one line starting with \"rdmatool: \"", stderr)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr %q does not contain %q", stderr, s)
				}
			}
		})
	}
}

func TestRunDocsMan(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "man8") // created by the command
	code, stdout, stderr := runCLI(t, "docs", "man", dir)
	if code != 0 || stdout != "" || stderr != "" {
		t.Fatalf("rdmatool docs man: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	page, err := os.ReadFile(filepath.Join(dir, "rdmatool.8"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`.TH "RDMATOOL" "8"`, "rdmatool " + version, "Exit status", `\fB-j\fP, \fB--json\fP`} {
		if !strings.Contains(string(page), s) {
			t.Errorf("rdmatool.8 does not contain %q", s)
		}
	}
	for _, name := range []string{"rdmatool-version.8", "rdmatool-dev.8", "rdmatool-link.8", "rdmatool-link-add.8", "rdmatool-res.8", "rdmatool-docs-man.8"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("no page for a command: %v", err)
		}
	}
	res, err := os.ReadFile(filepath.Join(dir, "rdmatool-res.8"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res), "lqpn 0-6") {
		t.Errorf("rdmatool-res.8 does not document number ranges (lqpn 0-6)")
	}
}

func TestRunDocsManUnwritable(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "docs", "man", filepath.Join(file, "man8"))
	if code != 2 || !strings.HasPrefix(stderr, "rdmatool: docs: create ") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("rdmatool docs man into a file: exit %d, stderr %q, want 2 and one line \"rdmatool: docs: create ...\"", code, stderr)
	}
}

// What the user typed is checked before netlink is opened: on this host,
// which has no RDMA netlink, the argument's error shows, not netlink's.
func TestArgsCheckedFirst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"res", "qp", "lqpn", "x-y"}, `rdmatool: filter lqpn: "x-y" is not a number or range`},
		{[]string{"res", "bogus"}, `rdmatool: unknown resource "bogus" (want summary, qp, cq, mr, pd, ctx, srq or cm_id)`},
		{[]string{"res", "qp", "link", "/1"}, `rdmatool: link "/1": no device name`},
		{[]string{"res", "qp", "link", "rxe0/x"}, `rdmatool: link "rxe0/x": port must be a number from 1`},
		{[]string{"res", "summary", "dev", "rxe0"}, `rdmatool: res summary takes no filters`},
		{[]string{"res", "qp", "nosuch", "1"}, `rdmatool: unknown filter "nosuch"`},
		{[]string{"link", "add", "a/b", "type", "rxe", "netdev", "eth0"}, `rdmatool: link add "a/b": invalid name "a/b": contains '/'`},
		{[]string{"link", "add", "rxe1", "type", "rxe", "netdev", "eth0/1"}, `rdmatool: netdev "eth0/1": not a network interface name`},
		{[]string{"link", "add", "rxe1", "type", "rxe", "netdev", "averyveryverylongname"}, `rdmatool: netdev "averyveryverylongname": not a network interface name`},
		{[]string{"link", "show", "rxe0/0"}, `rdmatool: link "rxe0/0": port must be a number from 1`},
		// Enumerated values are the kernel's names (issue 24: a typo was
		// an empty listing, a false "nothing").
		{[]string{"res", "qp", "state", "FOO"}, `rdmatool: filter state: unknown value "FOO" (valid: RESET INIT RTR RTS SQD SQE ERR)`},
		{[]string{"res", "qp", "type", "rc"}, `rdmatool: filter type: unknown value "rc" (valid: SMI GSI RC UC UD RAW_IPV6 RAW_ETHERTYPE RAW_PACKET XRC_INI XRC_TGT DRIVER)`},
		{[]string{"res", "qp", "path-mig-state", "ARMED,X"}, `rdmatool: filter path-mig-state: unknown value "X" (valid: MIGRATED REARM ARMED)`},
		{[]string{"res", "qp", "state", ""}, `rdmatool: filter state: unknown value "" (valid: `},
		{[]string{"res", "qp", "srq", "yes"}, `rdmatool: filter srq: unknown value "yes" (valid: true false)`},
		{[]string{"res", "cq", "poll-ctx", "softirq"}, `rdmatool: filter poll-ctx: unknown value "softirq" (valid: DIRECT SOFTIRQ WORKQUEUE UNBOUND_WORKQUEUE)`},
		{[]string{"res", "cq", "adaptive-moderation", "on"}, `rdmatool: filter adaptive-moderation: unknown value "on" (valid: true false)`},
		{[]string{"res", "srq", "type", "SRQ"}, `rdmatool: filter type: unknown value "SRQ" (valid: BASIC XRC TM)`},
		{[]string{"res", "cm_id", "state", "CONNECTED"}, `rdmatool: filter state: unknown value "CONNECTED" (valid: IDLE ADDR_QUERY`},
		{[]string{"res", "cm_id", "qp-type", "RCX"}, `rdmatool: filter qp-type: unknown value "RCX" (valid: SMI GSI RC`},
		{[]string{"res", "cm_id", "ps", "SDP"}, `rdmatool: filter ps: unknown value "SDP" (valid: IPOIB TCP UDP IB)`},
		{[]string{"res", "qp", "state", "unknown(x)"}, `rdmatool: filter state: unknown value "unknown(x)"`},
		// Issue 39: misleading messages.
		{[]string{"res", "qp", "lqpn", "-5"}, `rdmatool: -5: a negative number; no value rdmatool takes is below 0`},
		{[]string{"--", "dev"}, `rdmatool: "--" before the command: the command comes first (rdmatool COMMAND [ARGS])`},
		{[]string{"-j", "--", "dev"}, `rdmatool: "--" before the command`},
		{[]string{"res", "qp", "state", "ERR", "state", "INIT"}, `rdmatool: state "ERR" and state "INIT" select nothing together`},
		// Selectors: one, once (issue 24: the last one won).
		{[]string{"res", "qp", "dev", "rxe0", "link", "rxe1"}, `rdmatool: dev "rxe0" and link "rxe1": give one of link and dev, once`},
		{[]string{"res", "cq", "dev", "a", "dev", "b"}, `rdmatool: dev "a" and dev "b": give one of dev and link, once`},
		{[]string{"res", "qp", "link", "rxe0/1", "link", "rxe0/2"}, `rdmatool: link "rxe0/1" and link "rxe0/2": give one of link and dev, once`},
		{[]string{"res", "mr", "dev", ""}, `rdmatool: dev "": no device name`},
		{[]string{"dev", "rxe0", "rxe1"}, `rdmatool: dev: "rxe0" and "rxe1": give one device, or none for all`},
		{[]string{"dev", "show", "rxe0", "show"}, `rdmatool: dev: "rxe0" and "show": give one device, or none for all`},
		{[]string{"dev", strings.Repeat("d", 64)}, `rdmatool: device "` + strings.Repeat("d", 64) + `": no RDMA device has a name longer than 63 bytes`},
		{[]string{"link", "show", strings.Repeat("d", 100) + "/1"}, `rdmatool: device "`},
		{[]string{"link", "delete", strings.Repeat("d", 100)}, `rdmatool: device "`},
		{[]string{"qp-leaks", "--max-qp", "rxe0=5", "--max-qp", "rxe0=6"}, `rdmatool: --max-qp: leakwatch: max_qp "rxe0=5" and "rxe0=6": one limit per device`},
		{[]string{"qp-leaks", "--dev", "a", "--dev", "b"}, `rdmatool: --dev "a" and --dev "b": give one`},
		{[]string{"qp-leaks", "--dev="}, `rdmatool: --dev: no RDMA device has an empty name`},
		{[]string{"trace", "--dev", "a", "--dev", "b"}, `rdmatool: --dev "a" and --dev "b": give one`},
		// Paths: what the kernel takes; "" is no path (issue 24: --map ''
		// was the default map, --socket '' the default socket).
		{[]string{"rename", "--all", "--map", ""}, `rdmatool: --map "": want a path`},
		{[]string{"rename", "udev", "--map", "", "--", "rxe0"}, `rdmatool: --map "": want a path`},
		{[]string{"reset", "rxe0", "--map", ""}, `rdmatool: --map "": want a path`},
		{[]string{"reset", strings.Repeat("r", 64)}, `rdmatool: device "`},
		{[]string{"rename", strings.Repeat("r", 64)}, `rdmatool: rename: device "`},
		{[]string{"docs", "man", ""}, `rdmatool: docs man: directory "": want a path`},
		{[]string{"docs", "man", strings.Repeat("m", 300)}, `rdmatool: docs man: directory "mmmm`},
		{[]string{"qp-leaks", "--agent-socket", "/" + strings.Repeat("a", 107)}, `rdmatool: --agent-socket "/aaa`},
		{[]string{"qp-leaks", "--agent-socket", "a\x00b"}, `rdmatool: --agent-socket "a\x00b": a path has no NUL byte`},
		// --agent-socket "" asks no agent: the local observation's error.
		{[]string{"qp-leaks", "--agent-socket", ""}, `rdmatool: rdmanl: open netlink socket`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tt.args...)
			if code != 2 || stdout != "" || !strings.HasPrefix(stderr, tt.want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line starting %q", code, stdout, stderr, tt.want)
			}
		})
	}
}

// SOURCE_DATE_EPOCH dates the pages; one that is not a time from 1970 to
// 9999 is an error before anything is written, not today's date or the
// year -1199.
func TestRunDocsManSourceDateEpoch(t *testing.T) {
	for _, tt := range []struct{ epoch, date, err string }{
		{"1796677042", `"Dec 2026"`, ""},
		{"0", `"Jan 1970"`, ""},
		{"-100000000000", "", `rdmatool: docs man: SOURCE_DATE_EPOCH "-100000000000": want the seconds since 1970 (0 to 253402300799)`},
		{"yesterday", "", `rdmatool: docs man: SOURCE_DATE_EPOCH "yesterday": want the seconds since 1970`},
		{"253402300800", "", `rdmatool: docs man: SOURCE_DATE_EPOCH "253402300800": want`},
	} {
		t.Setenv("SOURCE_DATE_EPOCH", tt.epoch)
		dir := filepath.Join(t.TempDir(), "man8")
		code, _, stderr := runCLI(t, "docs", "man", dir)
		if tt.err != "" {
			if _, err := os.Stat(dir); code != 2 || !strings.HasPrefix(stderr, tt.err) || err == nil {
				t.Errorf("SOURCE_DATE_EPOCH=%s: exit %d, stderr %q, directory made: %v; want 2, %q, none", tt.epoch, code, stderr, err == nil, tt.err)
			}
			continue
		}
		page, err := os.ReadFile(filepath.Join(dir, "rdmatool.8"))
		if code != 0 || err != nil || !strings.Contains(string(page), `.TH "RDMATOOL" "8" `+tt.date) {
			t.Errorf("SOURCE_DATE_EPOCH=%s: exit %d (%v), stderr %q; want pages dated %s", tt.epoch, code, err, stderr, tt.date)
		}
	}
}
