package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// guestRun is one line of a times file (report): what a guest run cost.
type guestRun struct {
	kernel, guest                   string
	threads                         int
	queued, wall, boot, cpu, status string
}

// pkgTime is a lab package's run in one guest: its seconds, how busy it
// kept the guest's CPUs, and its top-level tests' seconds.
type pkgTime struct {
	secs, busy int
	tests      map[string]float64
}

// merge adds q, the same package's run in another guest of the kernel
// (the heavy tests' guest and the package's own), to p: their seconds
// and tests summed, busy weighted by their seconds.
func (p *pkgTime) merge(q *pkgTime) *pkgTime {
	if p == nil {
		return q
	}
	m := &pkgTime{secs: p.secs + q.secs, busy: -1, tests: maps.Clone(p.tests)}
	if p.busy >= 0 && q.busy >= 0 && m.secs > 0 {
		m.busy = (p.busy*p.secs + q.busy*q.secs) / m.secs
	}
	for name, s := range q.tests {
		m.tests[name] += s
	}
	return m
}

// readTimes reads a times file of report lines; a missing file is none.
func readTimes(path string) ([]guestRun, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var runs []guestRun
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 9 {
			return nil, fmt.Errorf("%s:%d: %d fields, want 9", path, i+1, len(f))
		}
		threads, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: threads: %w", path, i+1, err)
		}
		runs = append(runs, guestRun{kernel: f[0], guest: f[1], threads: threads,
			queued: f[3], wall: f[4], boot: f[5], cpu: f[6], status: f[8]})
	}
	return runs, nil
}

var systemLine = regexp.MustCompile(`^(?:ok  |FAIL|reboot)\t(\S+) (\S+)\t(\d+)s`)

// parseLabLog reads a lab guest's output (vmtest/labtests.sh: go test -v
// of each package, then its labtime line) or a system guest's
// (vmtest/systemtests.sh: a line for each test) into each package's time
// and its top-level tests' times (busy -1: not measured).
func parseLabLog(r io.Reader) (map[string]*pkgTime, error) {
	pkgs := map[string]*pkgTime{}
	tests := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if rest, ok := strings.CutPrefix(line, "labtime\t"); ok {
			f := strings.Split(rest, "\t")
			if len(f) != 3 {
				continue
			}
			p := &pkgTime{tests: tests}
			p.secs, _ = strconv.Atoi(strings.TrimSuffix(f[1], "s"))
			p.busy, _ = strconv.Atoi(strings.TrimSuffix(f[2], "% busy"))
			pkgs[f[0]] = p
			tests = map[string]float64{}
			continue
		}
		// vmtest/systemtests.sh's lines, a test each: "ok  ", "FAIL" or
		// "reboot", then "PKG TEST" and its seconds.
		if m := systemLine.FindStringSubmatch(line); m != nil {
			p := pkgs[m[1]]
			if p == nil {
				p = &pkgTime{busy: -1, tests: map[string]float64{}}
				pkgs[m[1]] = p
			}
			secs, _ := strconv.Atoi(m[3])
			p.secs += secs
			p.tests[m[2]] += float64(secs)
			continue
		}
		// Only top-level tests: subtests' lines are indented.
		for _, prefix := range []string{"--- PASS: ", "--- FAIL: ", "--- SKIP: "} {
			rest, ok := strings.CutPrefix(line, prefix)
			if !ok {
				continue
			}
			name, secs, ok := strings.Cut(rest, " (")
			if !ok {
				break
			}
			if v, err := strconv.ParseFloat(strings.TrimSuffix(secs, "s)"), 64); err == nil {
				tests[name] += v
			}
		}
	}
	return pkgs, sc.Err()
}

// times prints the lab's time table from dir: the guest runs of its times
// file, each package's seconds and guest CPU use per kernel (KERNEL.log,
// or KERNEL-GROUP.log for each guest of a kernel), and the slowest tests.
func times(w io.Writer, dir string, kernels []string, top int) error {
	runs, err := readTimes(filepath.Join(dir, "times"))
	if err != nil {
		return err
	}
	logs := map[string]map[string]*pkgTime{}
	var have []string
	for _, k := range kernels {
		// A kernel's guests: KERNEL.log, or KERNEL-GROUP.log each.
		paths, err := filepath.Glob(filepath.Join(dir, k+"-*.log"))
		if err != nil {
			return err
		}
		paths = append(paths, filepath.Join(dir, k+".log"))
		all := map[string]*pkgTime{}
		for _, path := range paths {
			f, err := os.Open(path)
			if os.IsNotExist(err) {
				continue
			}
			if err != nil {
				return err
			}
			pkgs, err := parseLabLog(f)
			_ = f.Close() // read only
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			for name, p := range pkgs {
				all[name] = all[name].merge(p)
			}
		}
		if len(all) > 0 {
			logs[k] = all
			have = append(have, k)
		}
	}

	tw := &table{}
	tw.row("guest", "threads", "queued s", "wall s", "boot s", "QEMU CPU s", "busy", "status")
	for _, r := range runs {
		busy := "?"
		wall, _ := strconv.ParseFloat(r.wall, 64)
		cpu, _ := strconv.ParseFloat(r.cpu, 64)
		if wall > 0 && r.threads > 0 {
			busy = fmt.Sprintf("%.0f%%", 100*cpu/(wall*float64(r.threads)))
		}
		tw.row(r.kernel+" "+r.guest, strconv.Itoa(r.threads), r.queued, r.wall, r.boot, r.cpu, busy, r.status)
	}
	if len(runs) > 0 {
		fmt.Fprintln(w, "Guest runs (busy: QEMU's CPU time over its wall time on its host threads)")
		tw.print(w)
		fmt.Fprintln(w)
	}
	if len(have) == 0 {
		return nil
	}

	pkgSet := map[string]bool{}
	for _, pkgs := range logs {
		for p := range pkgs {
			pkgSet[p] = true
		}
	}
	pkgNames := slices.Sorted(maps.Keys(pkgSet))
	tw = &table{}
	tw.row(append([]string{"package"}, have...)...)
	total := make([]int, len(have))
	for _, p := range pkgNames {
		row := []string{p}
		for i, k := range have {
			if pt, ok := logs[k][p]; ok {
				busy := fmt.Sprintf(", %d%% busy", pt.busy)
				if pt.busy < 0 {
					busy = ""
				}
				row = append(row, fmt.Sprintf("%ds%s", pt.secs, busy))
				total[i] += pt.secs
			} else {
				row = append(row, "-")
			}
		}
		tw.row(row...)
	}
	row := []string{"all"}
	for _, t := range total {
		row = append(row, fmt.Sprintf("%ds", t))
	}
	tw.row(row...)
	fmt.Fprintln(w, "Packages per kernel (busy: the guest's CPUs, from its /proc/stat; system guests: the sum of their tests)")
	tw.print(w)
	fmt.Fprintln(w)

	type testTime struct {
		name string
		secs []float64
		sum  float64
	}
	byName := map[string]*testTime{}
	for i, k := range have {
		for p, pt := range logs[k] {
			for name, s := range pt.tests {
				key := p + " " + name
				tt := byName[key]
				if tt == nil {
					tt = &testTime{name: key, secs: make([]float64, len(have))}
					byName[key] = tt
				}
				tt.secs[i] += s
				tt.sum += s
			}
		}
	}
	var all []*testTime
	for _, tt := range byName {
		all = append(all, tt)
	}
	slices.SortFunc(all, func(a, b *testTime) int {
		return cmp.Or(cmp.Compare(b.sum, a.sum), strings.Compare(a.name, b.name))
	})
	if len(all) > top {
		all = all[:top]
	}
	tw = &table{}
	tw.row(append(append([]string{"test"}, have...), "sum")...)
	for _, tt := range all {
		row := []string{tt.name}
		for _, s := range tt.secs {
			row = append(row, fmt.Sprintf("%.0fs", s))
		}
		tw.row(append(row, fmt.Sprintf("%.0fs", tt.sum))...)
	}
	fmt.Fprintf(w, "The %d slowest tests (seconds per kernel)\n", len(all))
	tw.print(w)
	return nil
}

// table lines up rows of cells in columns (text/tabwriter), two spaces
// apart.
type table struct{ rows [][]string }

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush() // w's errors are the caller's to see
}
