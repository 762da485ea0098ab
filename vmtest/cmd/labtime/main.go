// Command labtime runs a command several times and reports its wall time
// and peak resident set size, for side-by-side benchmarks in the lab guest
// (busybox has no GNU time). The command's stdout goes to /dev/null.
//
//	labtime [-n 5] [-label NAME] [-ok 0,1] [-after SHELL] -- COMMAND [ARG...]
//
// It prints one line: label, runs, min/median/max wall seconds, and the
// largest maxrss over the runs in KiB. -after is a shell command run,
// untimed, after each run: what undoes the run (a rename back) so that
// the next one measures the same work.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", 5, "runs")
	label := flag.String("label", "", "name to print (default: the command)")
	okCodes := flag.String("ok", "0", "exit statuses that count as success, comma separated")
	after := flag.String("after", "", "shell command run, untimed, after each run")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 || *n < 1 {
		fmt.Fprintln(os.Stderr, "usage: labtime [-n N] [-label NAME] [-ok CODES] [-after SHELL] -- COMMAND [ARG...]")
		os.Exit(2)
	}
	if *label == "" {
		*label = fmt.Sprint(args)
	}
	var walls []float64
	var maxRSS int64
	for range *n {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stderr = os.Stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !slices.Contains(strings.Split(*okCodes, ","), strconv.Itoa(ee.ExitCode())) {
				fmt.Fprintf(os.Stderr, "labtime: %s: %v\n", *label, err)
				os.Exit(1)
			}
		}
		walls = append(walls, time.Since(start).Seconds())
		if *after != "" {
			undo := exec.Command("sh", "-c", *after)
			undo.Stdout, undo.Stderr = os.Stderr, os.Stderr
			if err := undo.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "labtime: %s: after: %v\n", *label, err)
				os.Exit(1)
			}
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > maxRSS {
			maxRSS = ru.Maxrss
		}
	}
	slices.Sort(walls)
	fmt.Printf("%-28s runs %d  wall min %.3fs median %.3fs max %.3fs  maxrss %d KiB\n",
		*label, *n, walls[0], walls[len(walls)/2], walls[len(walls)-1], maxRSS)
}
