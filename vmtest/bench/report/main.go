// Command report turns make bench's logs into one table per kernel, a JSON
// file for comparison across commits, and a PNG plot of QP dump time against
// the number of QPs (drawn by gnuplot).
//
//	report [-json FILE] [-plot FILE] [-gobench FILE] [-date D] [-commit C] LOG...
//
// Each LOG is the output of one guest run of vmtest/bench/qp-dump.sh;
// -gobench is the output of go test -bench -benchmem.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is the JSON file's content.
type Report struct {
	Date         string      `json:"date"`
	Commit       string      `json:"commit"`
	Kernels      []KernelRun `json:"kernels"`
	GoBenchmarks []GoBench   `json:"go_benchmarks"`
}

// KernelRun is one guest run.
type KernelRun struct {
	Kernel  string `json:"kernel"`
	Release string `json:"release"`
	Sizes   []Size `json:"sizes"`
	// Rename holds the udev renames of one device, start to exit, by
	// program: rdmatool, rdma_rename.
	Rename map[string]Timing `json:"rename"`
	// Probes is the summary vmtest/bench/trace-overhead.sh printed, line
	// by line (empty when BENCH_TRACE=no).
	Probes []string `json:"probes,omitempty"`
}

// Size holds what was measured with one number of QPs held.
type Size struct {
	QPs int `json:"qps"`
	// Timings by label: floor, rdmatool, rdmatool-text, iproute2,
	// qp-leaks-netlink, qp-leaks-probes, qp-leaks-agent.
	Timings        map[string]Timing `json:"timings"`
	FloorDatagrams int               `json:"floor_datagrams"`
	FloorBytes     int               `json:"floor_bytes"`
	AnswerBytes    map[string]int    `json:"answer_bytes"`
	AgentRSSKiB    int               `json:"agent_rss_kib"`
	AgentHWMKiB    int               `json:"agent_hwm_kib"`
	// The agent at idle (asked nothing, scanning every --interval): its
	// CPU over the window as a fraction of one CPU, its RSS at the end.
	AgentIdleCPU    float64 `json:"agent_idle_cpu"`
	AgentIdleRSSKiB int     `json:"agent_idle_rss_kib"`
	// AgentLostEvents is the probe events the agent had lost (its ring
	// buffer full) since it started, read after the idle window.
	AgentLostEvents int `json:"agent_lost_events"`
	// Under paced QP churn (about 1,000 probe events a second): the
	// events a second the churn made (six per cycle), and the CPU the
	// agent and a JSON reader (rdmatool trace -j) used, as fractions of
	// one CPU.
	ChurnEventsPerSec float64 `json:"churn_events_per_sec,omitempty"`
	AgentChurnCPU     float64 `json:"agent_churn_cpu,omitempty"`
	ReaderChurnCPU    float64 `json:"reader_churn_cpu,omitempty"`
}

// Timing is one labtime line.
type Timing struct {
	Runs          int     `json:"runs"`
	MinSeconds    float64 `json:"min_seconds"`
	MedianSeconds float64 `json:"median_seconds"`
	MaxSeconds    float64 `json:"max_seconds"`
	MaxRSSKiB     int     `json:"max_rss_kib"`
}

// GoBench is one go test -bench result line.
type GoBench struct {
	Name    string  `json:"name"`
	NsPerOp float64 `json:"ns_per_op"`
	NsPerQP float64 `json:"ns_per_qp"`
	// HeapPerQP is the heap kept per tracked QP (BenchmarkTrack).
	HeapPerQP   float64 `json:"heap_bytes_per_qp"`
	BytesPerOp  int     `json:"bytes_per_op"`
	AllocsPerOp int     `json:"allocs_per_op"`
}

var (
	kernelLine  = regexp.MustCompile(`^== kernel (\S+) \((\S+)\)`)
	labtimeLine = regexp.MustCompile(`^(\S+) (\d+)\s+runs (\d+)\s+wall min ([0-9.]+)s median ([0-9.]+)s max ([0-9.]+)s\s+maxrss (\d+) KiB`)
	floorLine   = regexp.MustCompile(`^nlfloor: \d+ devices, (\d+) datagrams, \d+ messages, (\d+) bytes`)
	heldLine    = regexp.MustCompile(`^held (\d+) QPs`)
	sizeLine    = regexp.MustCompile(`^size (\S+) (\d+) (\d+)`)
	agentLine   = regexp.MustCompile(`^agent (\d+) .*VmHWM: (\d+) kB.*VmRSS: (\d+) kB`)
	idleWork    = regexp.MustCompile(`^idle-work (\d+) after .*"lost_events":(\d+)`)
	idleLine    = regexp.MustCompile(`^idle (\d+) ticks (\d+) hz (\d+) seconds (\d+) rss (\d+) kB`)
	churnLine   = regexp.MustCompile(`^churn (\d+) cycles (\d+) seconds ([0-9.]+) agent-ticks (\d+) reader-ticks (\d+) hz (\d+)`)
	// trace-overhead.sh's summary lines
	probeLine   = regexp.MustCompile(`^(median cycles/s|  probes|in-kernel probe time|highest churn)`)
	goBenchLine = regexp.MustCompile(`^(Benchmark\S+)\s+\d+\s+([0-9.]+) ns/op(?:\s+([0-9.]+) heap-B/qp)?(?:\s+([0-9.]+) ns/qp)?\s+(\d+) B/op\s+(\d+) allocs/op`)
)

func main() {
	jsonOut := flag.String("json", "", "write the report as JSON to this file")
	plotOut := flag.String("plot", "", "draw the QP dump plot (PNG) to this file with gnuplot")
	goBench := flag.String("gobench", "", "go test -bench output to include")
	date := flag.String("date", time.Now().UTC().Format("2006-01-02"), "date of the run")
	commit := flag.String("commit", "", "commit measured")
	flag.Parse()
	rep := Report{Date: *date, Commit: *commit, GoBenchmarks: []GoBench{}}
	for _, path := range flag.Args() {
		k, err := parseLog(path)
		if err != nil {
			fail(err)
		}
		if i := slices.IndexFunc(rep.Kernels, func(r KernelRun) bool { return r.Kernel == k.Kernel }); i >= 0 {
			// a kernel's second log: trace-overhead.sh's
			rep.Kernels[i].Probes = append(rep.Kernels[i].Probes, k.Probes...)
			continue
		}
		rep.Kernels = append(rep.Kernels, k)
	}
	if *goBench != "" {
		b, err := os.ReadFile(*goBench)
		if err != nil {
			fail(err)
		}
		rep.GoBenchmarks = parseGoBench(b)
	}
	printTables(os.Stdout, rep)
	if *jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			fail(err)
		}
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fail(err)
		}
	}
	if *plotOut != "" {
		if err := plot(rep, *plotOut); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "report:", err)
	os.Exit(1)
}

func atoi(s string) int     { n, _ := strconv.Atoi(s); return n }
func atof(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }

func parseLog(path string) (KernelRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return KernelRun{}, err
	}
	defer f.Close() //nolint:errcheck // read only
	k := KernelRun{Rename: map[string]Timing{}}
	size := func(n int) *Size {
		for i := range k.Sizes {
			if k.Sizes[i].QPs == n {
				return &k.Sizes[i]
			}
		}
		k.Sizes = append(k.Sizes, Size{QPs: n, Timings: map[string]Timing{}, AnswerBytes: map[string]int{}})
		return &k.Sizes[len(k.Sizes)-1]
	}
	held := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := kernelLine.FindStringSubmatch(line); m != nil {
			k.Kernel, k.Release = m[1], m[2]
		} else if m := heldLine.FindStringSubmatch(line); m != nil {
			held = atoi(m[1])
		} else if m := floorLine.FindStringSubmatch(line); m != nil && held > 0 {
			s := size(held)
			s.FloorDatagrams, s.FloorBytes = atoi(m[1]), atoi(m[2])
		} else if m := labtimeLine.FindStringSubmatch(line); m != nil {
			t := Timing{Runs: atoi(m[3]), MinSeconds: atof(m[4]), MedianSeconds: atof(m[5]), MaxSeconds: atof(m[6]), MaxRSSKiB: atoi(m[7])}
			if prog, ok := strings.CutPrefix(m[1], "rename-"); ok {
				k.Rename[prog] = t
			} else {
				size(atoi(m[2])).Timings[m[1]] = t
			}
		} else if m := idleWork.FindStringSubmatch(line); m != nil {
			size(atoi(m[1])).AgentLostEvents = atoi(m[2])
		} else if m := sizeLine.FindStringSubmatch(line); m != nil {
			size(atoi(m[2])).AnswerBytes[m[1]] = atoi(m[3])
		} else if m := idleLine.FindStringSubmatch(line); m != nil && atoi(m[3]) > 0 && atoi(m[4]) > 0 {
			s := size(atoi(m[1]))
			s.AgentIdleCPU = float64(atoi(m[2])) / float64(atoi(m[3])) / float64(atoi(m[4]))
			s.AgentIdleRSSKiB = atoi(m[5])
		} else if m := churnLine.FindStringSubmatch(line); m != nil && atof(m[3]) > 0 && atoi(m[6]) > 0 {
			s, secs, hz := size(atoi(m[1])), atof(m[3]), float64(atoi(m[6]))
			s.ChurnEventsPerSec = 6 * float64(atoi(m[2])) / secs
			s.AgentChurnCPU = float64(atoi(m[4])) / hz / secs
			s.ReaderChurnCPU = float64(atoi(m[5])) / hz / secs
		} else if probeLine.MatchString(line) {
			k.Probes = append(k.Probes, strings.TrimSpace(line))
		} else if m := agentLine.FindStringSubmatch(line); m != nil {
			s := size(atoi(m[1]))
			s.AgentHWMKiB, s.AgentRSSKiB = atoi(m[2]), atoi(m[3])
		}
	}
	if err := sc.Err(); err != nil {
		return k, err
	}
	if k.Kernel == "" {
		return k, fmt.Errorf("%s: no kernel line; did the guest run fail?", path)
	}
	return k, nil
}

func parseGoBench(b []byte) []GoBench {
	out := []GoBench{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := goBenchLine.FindStringSubmatch(line); m != nil {
			out = append(out, GoBench{Name: m[1], NsPerOp: atof(m[2]), HeapPerQP: atof(m[3]), NsPerQP: atof(m[4]), BytesPerOp: atoi(m[5]), AllocsPerOp: atoi(m[6])})
		}
	}
	return out
}

// median seconds of a label, or NaN when it was not measured.
func (s Size) median(label string) float64 {
	t, ok := s.Timings[label]
	if !ok {
		return math.NaN()
	}
	return t.MedianSeconds
}

func secs(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.3f", v)
}

func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func mib(kib int) string {
	if kib == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(kib)/1024)
}

func printTables(w io.Writer, rep Report) {
	for _, k := range rep.Kernels {
		fmt.Fprintf(w, "\n### kernel %s (%s), %s, commit %s\n\n", k.Kernel, k.Release, rep.Date, rep.Commit)
		fmt.Fprintln(w, "QP dump, median wall seconds (peak RSS MiB):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| QPs | floor | rdmatool -j | rdmatool text | iproute2 -j | rdmatool/floor | rdmatool/iproute2 | floor replies |")
		fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, s := range k.Sizes {
			cell := func(label string) string {
				return fmt.Sprintf("%s (%s)", secs(s.median(label)), mib(s.Timings[label].MaxRSSKiB))
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %d |\n", s.QPs,
				cell("floor"), cell("rdmatool"), cell("rdmatool-text"), cell("iproute2"),
				ratio(s.median("rdmatool"), s.median("floor")), ratio(s.median("rdmatool"), s.median("iproute2")), s.FloorDatagrams)
		}
		fmt.Fprintln(w)
		fmt.Fprint(w, "Growth exponent t ~ N^e between the two largest sizes (1 linear, 2 quadratic):")
		for _, label := range []string{"floor", "rdmatool", "iproute2"} {
			fmt.Fprintf(w, " %s %s", label, growth(k.Sizes, label))
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w)
		fmt.Fprintln(w, "qp-leaks, median wall seconds; answer bytes; agent RSS MiB:")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| QPs | netlink (2s watch) | probes (2s watch) | answered by agent | agent, every finding | answer bytes (local, every finding) | answer bytes (agent) | answer bytes (agent, every finding) | agent RSS (peak) | agent at idle: CPU, RSS | agent's lost events |")
		fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, s := range k.Sizes {
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %d | %d | %d | %s (%s) | %.1f%%, %s | %d |\n", s.QPs,
				secs(s.median("qp-leaks-netlink")), secs(s.median("qp-leaks-probes")), secs(s.median("qp-leaks-agent")),
				secs(s.median("qp-leaks-agent-all")), s.AnswerBytes["qp-leaks-netlink"], s.AnswerBytes["qp-leaks-agent"],
				s.AnswerBytes["qp-leaks-agent-all"], mib(s.AgentRSSKiB), mib(s.AgentHWMKiB), 100*s.AgentIdleCPU, mib(s.AgentIdleRSSKiB),
				s.AgentLostEvents)
		}
		if slices.ContainsFunc(k.Sizes, func(s Size) bool { return s.ChurnEventsPerSec > 0 }) {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "Probe events under paced QP churn (10 s at 167 create, INIT, RTR, RTS, ERR, destroy cycles a second), the agent and a JSON reader (`rdmatool trace -j`) following them; CPU as % of one CPU, and per 10,000 events a second (the agent's less its idle CPU):")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| QPs held | events/s | agent CPU | JSON reader CPU | agent per 10k events/s | reader per 10k events/s |")
			fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|")
			for _, s := range k.Sizes {
				if s.ChurnEventsPerSec == 0 {
					continue
				}
				per := 1e4 / s.ChurnEventsPerSec
				fmt.Fprintf(w, "| %d | %.0f | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", s.QPs, s.ChurnEventsPerSec,
					100*s.AgentChurnCPU, 100*s.ReaderChurnCPU, 100*max(0, s.AgentChurnCPU-s.AgentIdleCPU)*per, 100*s.ReaderChurnCPU*per)
			}
		}
		if len(k.Probes) > 0 {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "Probe cost (vmtest/bench/trace-overhead.sh, instruction-counted guest time):")
			fmt.Fprintln(w)
			for _, l := range k.Probes {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
		if d, ok := k.Rename["rdma_rename"]; ok {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "udev rename of one device (rxe0 to its NAME_GUID name), start to exit, median ms over the runs (peak RSS MiB):")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| program | runs | median ms (peak RSS) | /rdma_rename |")
			fmt.Fprintln(w, "|---|---:|---:|---:|")
			// rdmatool-udev-rename is what the packaged rule runs;
			// rdmatool is `rdmatool rename udev`.
			for _, prog := range []string{"rdmatool-udev-rename", "rdmatool", "rdma_rename"} {
				if r, ok := k.Rename[prog]; ok {
					fmt.Fprintf(w, "| %s | %d | %.1f (%s) | %s |\n", prog, r.Runs, 1000*r.MedianSeconds, mib(r.MaxRSSKiB), ratio(r.MedianSeconds, d.MedianSeconds))
				}
			}
		}
	}
	if len(rep.GoBenchmarks) > 0 {
		fmt.Fprintln(w, "\nGo benchmarks (host):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| benchmark | ns/op | ns/QP | heap B/QP kept | B/op | allocs/op |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
		for _, b := range rep.GoBenchmarks {
			perQP := "–"
			if b.NsPerQP > 0 {
				perQP = fmt.Sprintf("%.0f", b.NsPerQP)
			}
			heap := "–"
			if b.HeapPerQP > 0 {
				heap = fmt.Sprintf("%.0f", b.HeapPerQP)
			}
			fmt.Fprintf(w, "| %s | %.0f | %s | %s | %d | %d |\n", b.Name, b.NsPerOp, perQP, heap, b.BytesPerOp, b.AllocsPerOp)
		}
	}
}

// growth is the exponent e in t ~ N^e between the two largest sizes
// measured for label.
func growth(sizes []Size, label string) string {
	var pts []Size
	for _, s := range sizes {
		if !math.IsNaN(s.median(label)) {
			pts = append(pts, s)
		}
	}
	if len(pts) < 2 {
		return "–"
	}
	a, b := pts[len(pts)-2], pts[len(pts)-1]
	return fmt.Sprintf("%.2f", math.Log(b.median(label)/a.median(label))/math.Log(float64(b.QPs)/float64(a.QPs)))
}

// plot draws one panel per kernel: median QP dump time against QPs for
// rdmatool, iproute2 and the floor.
func plot(rep Report, out string) error {
	var script bytes.Buffer
	fmt.Fprintf(&script, "set terminal pngcairo size %d,440 font ',10'\n", max(960, 80+420*len(rep.Kernels)))
	fmt.Fprintf(&script, "set output %q\n", out)
	fmt.Fprintf(&script, "set multiplot layout 1,%d title %q\n", len(rep.Kernels),
		fmt.Sprintf("QP dump on rxe0: median wall time, lab guest under TCG (%s, commit %s)", rep.Date, rep.Commit))
	script.WriteString("set key top left\nset grid\nset xlabel 'QPs held (thousands)'\nset ylabel 'seconds'\n")
	for _, k := range rep.Kernels {
		fmt.Fprintf(&script, "set title %q\n", "kernel "+k.Kernel+" ("+k.Release+")")
		var data strings.Builder
		for _, label := range []string{"rdmatool", "iproute2", "floor"} {
			for _, s := range k.Sizes {
				if v := s.median(label); !math.IsNaN(v) {
					fmt.Fprintf(&data, "%g %g\n", float64(s.QPs)/1000, v)
				}
			}
			data.WriteString("e\n")
		}
		script.WriteString("plot '-' using 1:2 with linespoints lw 2 title 'rdmatool res qp -j', " +
			"'-' using 1:2 with linespoints lw 2 title 'rdma -j res show qp (iproute2)', " +
			"'-' using 1:2 with linespoints lw 2 title 'floor (nlfloor: 32 KiB reads, discarded)'\n")
		script.WriteString(data.String())
	}
	script.WriteString("unset multiplot\n")
	cmd := exec.Command("gnuplot")
	cmd.Stdin = &script
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("gnuplot: %w", err)
	}
	return nil
}
