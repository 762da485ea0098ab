package lab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// apt runs apt-get and apt-cache, either against the host's own package lists
// or against a temporary source list of another suite (sid) that lives in the
// cache directory and is used for nothing but downloads.
type apt struct {
	opts []string // -o options that point apt at the temporary lists
}

// hostApt uses the host's configured sources.
func hostApt() *apt { return &apt{} }

// listsMaxAge is how old a temporary suite's package lists may get before
// they are fetched again.
const listsMaxAge = 24 * time.Hour

// suiteApt returns an apt that sees only suite, from the same mirror the host
// already uses for its own release, so no host name is written down anywhere.
func suiteApt(ctx context.Context, dir, suite string) (*apt, error) {
	uri, keyring, err := hostMirror("/etc/apt")
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"sources", "lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	src := fmt.Sprintf("Types: deb\nURIs: %s\nSuites: %s\nComponents: main\n", uri, suite)
	if keyring != "" {
		src += "Signed-By: " + keyring + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "sources", suite+".sources"), []byte(src), 0o644); err != nil {
		return nil, err
	}
	a := &apt{opts: []string{
		"-o", "Dir::Etc::SourceList=/dev/null",
		"-o", "Dir::Etc::SourceParts=" + filepath.Join(dir, "sources"),
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(dir, "cache"),
		"-o", "Dir::State::Status=/dev/null",
	}}
	stamp := filepath.Join(dir, "lists", ".updated")
	if fi, err := os.Stat(stamp); err == nil && time.Since(fi.ModTime()) < listsMaxAge {
		return a, nil
	}
	if _, err := a.run(ctx, "", "apt-get", "update"); err != nil {
		return nil, err
	}
	return a, os.WriteFile(stamp, nil, 0o644)
}

func (a *apt) run(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, append(slices.Clone(a.opts), args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, lastLines(stderr.String(), 5))
	}
	return out, nil
}

// depends lists the first alternative of every Depends of pkg.
func (a *apt) depends(ctx context.Context, pkg string) ([]string, error) {
	out, err := a.run(ctx, "", "apt-cache", "depends", "--no-recommends", "--no-suggests",
		"--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", pkg)
	if err != nil {
		return nil, err
	}
	return parseDepends(out), nil
}

// parseDepends reads apt-cache depends output. A line "|Depends: a" starts an
// or-group whose first member is a; the members that follow it are skipped.
func parseDepends(out []byte) []string {
	var deps []string
	inAlt := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		alt := strings.HasPrefix(line, "|")
		line = strings.TrimPrefix(line, "|")
		name, ok := strings.CutPrefix(line, "Depends: ")
		if !ok {
			name, ok = strings.CutPrefix(line, "PreDepends: ")
		}
		if !ok {
			continue
		}
		if !inAlt && !strings.HasPrefix(name, "<") {
			deps = append(deps, name)
		}
		inAlt = alt
	}
	return deps
}

// candidate returns the version apt would install of pkg.
func (a *apt) candidate(ctx context.Context, pkg string) (string, error) {
	out, err := a.run(ctx, "", "apt-cache", "policy", pkg)
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Candidate: "); ok && v != "(none)" {
			return v, nil
		}
	}
	return "", fmt.Errorf("apt: no candidate version of %s", pkg)
}

// download fetches pkgs (name or name=version) into dir and returns the .deb
// files that appeared there.
func (a *apt) download(ctx context.Context, dir string, pkgs ...string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	before, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	// apt drops privileges to _apt for downloads unless told not to; the
	// cache directory belongs to whoever runs the build.
	args := append([]string{"-o", "APT::Sandbox::User=root", "download"}, pkgs...)
	if _, err := a.run(ctx, dir, "apt-get", args...); err != nil {
		return nil, err
	}
	after, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	var added []string
	for _, f := range after {
		if !slices.Contains(before, f) {
			added = append(added, f)
		}
	}
	return added, nil
}

// extractDeb unpacks a .deb's file system into root.
func extractDeb(ctx context.Context, deb, root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, root).CombinedOutput()
	if err != nil {
		return fmt.Errorf("dpkg-deb -x %s: %w: %s", filepath.Base(deb), err, lastLines(string(out), 3))
	}
	return nil
}

// hostMirror finds the Debian mirror the host uses for its own release (not
// the security archive) in its apt configuration, with the keyring it names.
func hostMirror(etc string) (uri, keyring string, err error) {
	files, _ := filepath.Glob(filepath.Join(etc, "sources.list.d", "*.sources"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if uri, keyring := mirrorFromDeb822(string(b)); uri != "" {
			return uri, keyring, nil
		}
	}
	lists, _ := filepath.Glob(filepath.Join(etc, "sources.list.d", "*.list"))
	for _, f := range append([]string{filepath.Join(etc, "sources.list")}, lists...) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if uri := mirrorFromOneLine(string(b)); uri != "" {
			return uri, "/usr/share/keyrings/debian-archive-keyring.gpg", nil
		}
	}
	return "", "", fmt.Errorf("apt: no Debian mirror found in %s", etc)
}

// isDebianMain reports whether a source is the Debian archive itself for a
// release suite (bookworm, not bookworm-updates), with the main component:
// not the security archive and not a third-party repository that merely
// has "debian" in its URI (Docker, Microsoft).
func isDebianMain(uri string, suites, components []string) bool {
	u, err := url.Parse(uri)
	if err != nil || path.Base(strings.TrimSuffix(u.Path, "/")) != "debian" || !slices.Contains(components, "main") {
		return false
	}
	for _, s := range suites {
		if !strings.Contains(s, "-") && !strings.Contains(s, "/") {
			return true
		}
	}
	return false
}

func mirrorFromDeb822(text string) (uri, keyring string) {
	for stanza := range strings.SplitSeq(text, "\n\n") {
		fields := map[string]string{}
		for line := range strings.Lines(stanza) {
			line = strings.TrimSpace(line)
			if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
				fields[strings.ToLower(k)] = strings.TrimSpace(v)
			}
		}
		if !slices.Contains(strings.Fields(fields["types"]), "deb") || strings.Contains(fields["enabled"], "no") {
			continue
		}
		for u := range strings.FieldsSeq(fields["uris"]) {
			if isDebianMain(u, strings.Fields(fields["suites"]), strings.Fields(fields["components"])) {
				return u, fields["signed-by"]
			}
		}
	}
	return "", ""
}

func mirrorFromOneLine(text string) string {
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") { // options such as [arch=amd64]
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) < 3 {
				continue
			}
			f = f[1:]
		}
		if isDebianMain(f[0], f[1:2], f[2:]) {
			return f[0]
		}
	}
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// copyFile copies src to dst with mode.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close() //nolint:errcheck // read only
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close() // the copy failed: that error is returned
		return err
	}
	return out.Close()
}
