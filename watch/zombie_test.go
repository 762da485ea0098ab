package watch

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
)

// zombieProc is a proc tree where pids 300 ("stuck") and 400 ("reopened")
// hold fd 3 on the deleted node of an unregistered device, as the kernel
// shows it ("/dev/infiniband/uverbs0 (deleted)"). A fixture cannot hold a
// device node: the link's target, named so, leads to /dev/null, so the
// stat Holders makes finds a character device.
func zombieProc(t *testing.T) (procRoot, node string) {
	t.Helper()
	root := t.TempDir()
	devDir := filepath.Join(root, "dev", "infiniband")
	node = filepath.Join(devDir, "uverbs0")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(devDir, 0o755))
	must(os.Symlink("/dev/null", node+" (deleted)"))
	procRoot = filepath.Join(root, "proc")
	for pid, comm := range map[int]string{300: "stuck", 400: "reopened"} {
		dir := filepath.Join(procRoot, strconv.Itoa(pid))
		must(os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
		must(os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644))
		must(os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\t"+comm+"\nTgid:\t"+strconv.Itoa(pid)+"\n"), 0o644))
		must(os.Symlink(node+" (deleted)", filepath.Join(dir, "fd", "3")))
	}
	return procRoot, node
}

// qp-leaks observing locally reports the zombie context of the process
// that never reopened a device (300), not of the one with a verbs context
// on a current device (400), and not in a query for one device.
func TestCheckOnceReportsZombieContexts(t *testing.T) {
	procRoot, node := zombieProc(t)
	host := rdmanltest.NewHost(rxe, siw)
	host.SetContexts(siw.Index, rdmanl.Context{CtxN: 0, Owner: rdmanl.Owner{PID: 400}})
	d := Deps{Dial: dialer(host), ProcRoot: procRoot}
	o := CheckOptions{Watch: 30 * time.Millisecond, Interval: 10 * time.Millisecond, NoProbes: true, Rules: []string{leakwatch.RuleZombieUverbsContext}}
	rep, err := checkOnce(t.Context(), d, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || len(rep.SkippedRules) != 0 {
		t.Fatalf("findings %+v, skipped %+v; want one zombie-uverbs-context", rep.Findings, rep.SkippedRules)
	}
	f := rep.Findings[0]
	want := "holds fd 3 " + node + " (deleted); no verbs context on any device"
	if f.Rule != leakwatch.RuleZombieUverbsContext || f.PID != 300 || f.Comm != "stuck" || len(f.Evidence) != 1 || f.Evidence[0].What != want {
		t.Errorf("finding %+v; want pid 300 (stuck): %s", f, want)
	}
	o.Device = "rxe0"
	if rep, err := checkOnce(t.Context(), d, o); err != nil || len(rep.Findings) != 0 {
		t.Errorf("qp-leaks --dev rxe0: %+v, %v; want no zombie (it belongs to no device)", rep.Findings, err)
	}
	// Without /proc the rule says it was not evaluated, never "none".
	d.ProcRoot = filepath.Join(t.TempDir(), "none")
	o.Device = ""
	rep, err = checkOnce(t.Context(), d, o)
	if err != nil || len(rep.Findings) != 0 || len(rep.SkippedRules) != 1 || rep.SkippedRules[0].Rule != leakwatch.RuleZombieUverbsContext {
		t.Errorf("without /proc: %+v, skipped %+v, %v; want the rule skipped", rep.Findings, rep.SkippedRules, err)
	}
}
