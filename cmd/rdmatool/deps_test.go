package main

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const module = "github.com/rdmatool/rdmatool/"

// goPackage is what `go list -json` says of a package.
type goPackage struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// goCommand is the go command of the toolchain running the test: the one
// on PATH, which `go test` puts first, else GOROOT's.
func goCommand(t *testing.T) string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	out, err := exec.Command("/usr/local/go/bin/go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "bin", "go")
}

// goList runs `go list -json` on patterns from the module's root.
func goList(t *testing.T, args ...string) []goPackage {
	t.Helper()
	goBin := goCommand(t)
	cmd := exec.Command(goBin, append([]string{"list", "-json"}, args...)...)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// The rule engine, the udev rename helper's packages, the readers of
// netlink, /sys and /proc and the agent's socket API link no eBPF library:
// cilium/ebpf's packages run bpf() system calls and rlimit changes from
// their init functions.
func TestNoEBPFBelowTheAgent(t *testing.T) {
	for _, p := range goList(t, "-deps=false", "./leakwatch", "./rename", "./rdmanl", "./sysfs", "./owner", "./usage", "./agentapi/...") {
		full := goList(t, "-deps", "./"+strings.TrimPrefix(p.ImportPath, module))
		for _, d := range full {
			if strings.HasPrefix(d.ImportPath, "github.com/cilium/") || d.ImportPath == module+"bpf" {
				t.Errorf("%s depends on %s", p.ImportPath, d.ImportPath)
			}
		}
	}
}

// README's import table says what each package of the module imports from
// the module, as go list does; -update rewrites it from go list.
func TestREADMEImports(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "<!-- imports -->\n")
	table, _, ok2 := strings.Cut(table, "<!-- /imports -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no <!-- imports --> table")
	}
	documented := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n")[2:] {
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if len(cells) != 2 {
			t.Fatalf("README import table row %q", line)
		}
		var imports []string
		if v := strings.TrimSpace(cells[1]); v != "none" {
			for _, i := range strings.Split(v, ",") {
				imports = append(imports, strings.TrimSpace(i))
			}
		}
		for _, pkg := range strings.Split(cells[0], ",") {
			documented[strings.Trim(strings.TrimSpace(pkg), "`")] = imports
		}
	}
	actual := map[string][]string{}
	for _, p := range goList(t, "./...") {
		name := strings.TrimPrefix(p.ImportPath, module)
		if strings.HasPrefix(name, "vmtest") {
			continue // the lab, not the product
		}
		imports := []string{}
		for _, i := range p.Imports {
			if strings.HasPrefix(i, module) {
				imports = append(imports, strings.TrimPrefix(i, module))
			}
		}
		slices.Sort(imports)
		if len(imports) == 0 {
			imports = nil
		}
		actual[name] = imports
	}
	if *update {
		// The rows that import something, most imports first, then one
		// row of the packages that import nothing of the module.
		names := slices.Sorted(maps.Keys(actual))
		slices.SortStableFunc(names, func(a, b string) int { return len(actual[b]) - len(actual[a]) })
		var rows, none []string
		for _, n := range names {
			if len(actual[n]) == 0 {
				none = append(none, "`"+n+"`")
				continue
			}
			rows = append(rows, "| `"+n+"` | "+strings.Join(actual[n], ", ")+" |")
		}
		rows = append(rows, "| "+strings.Join(none, ", ")+" | none |")
		head, _, _ := strings.Cut(string(readme), "<!-- imports -->\n")
		_, tail, _ := strings.Cut(string(readme), "<!-- /imports -->")
		out := head + "<!-- imports -->\n| package | imports |\n|---|---|\n" + strings.Join(rows, "\n") + "\n<!-- /imports -->" + tail
		if err := os.WriteFile(filepath.Join("..", "..", "README.md"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(actual, documented); diff != "" {
		t.Errorf("README.md's import table is wrong (-go list +README; go test -run TestREADMEImports -update rewrites it):\n%s", diff)
	}
}
