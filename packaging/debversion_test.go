package packaging

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitRepo is a throwaway repository with a fixed identity and clock.
type gitRepo struct {
	t   *testing.T
	dir string
	env []string
}

func newGitRepo(t *testing.T) *gitRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	r := &gitRepo{t: t, dir: t.TempDir()}
	r.env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org")
	r.git("init", "-q", "-b", "main")
	return r
}

// git runs a git command in the repository and returns its output.
func (r *gitRepo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	cmd.Env = r.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit commits a change to file at the given second of the clock.
func (r *gitRepo) commit(n int) string {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.dir, "file"), []byte(fmt.Sprintln(n)), 0o644); err != nil {
		r.t.Fatal(err)
	}
	date := fmt.Sprintf("@%d +0000", 1767225600+n*60)
	r.env = append(r.env, "GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date)
	r.git("add", "file")
	r.git("commit", "-q", "-m", fmt.Sprint("commit ", n))
	return r.git("rev-parse", "HEAD")
}

// debVersion runs deb/debversion.sh on the checkout's description, as
// make deb does (the Makefile's VERSION is git describe --tags --always
// --dirty).
func (r *gitRepo) debVersion() string {
	r.t.Helper()
	describe := r.git("describe", "--tags", "--always", "--dirty")
	out, err := exec.Command("deb/debversion.sh", r.dir, describe).Output()
	if err != nil {
		r.t.Fatalf("debversion.sh %s: %v", describe, err)
	}
	return strings.TrimSpace(string(out))
}

// The Debian versions of consecutive commits sort in commit order with
// dpkg: untagged commits (by their count), a tag, commits after it (both
// past ten, where a string sort goes wrong), the next tag, and a dirty tree
// after its commit.
func TestDebVersionOrder(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("no dpkg")
	}
	r := newGitRepo(t)
	var commits []string
	for n := 1; n <= 24; n++ {
		commits = append(commits, r.commit(n))
		switch n {
		case 11:
			r.git("tag", "v0.1.0")
		case 24:
			r.git("tag", "-a", "-m", "v0.2.0", "v0.2.0")
		}
	}
	var versions []string
	for _, c := range commits {
		r.git("checkout", "-q", c)
		versions = append(versions, r.debVersion())
	}
	r.git("checkout", "-q", "main")
	if err := os.WriteFile(filepath.Join(r.dir, "file"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	versions = append(versions, r.debVersion())
	for i, want := range map[int]string{
		0:  "0~git1." + commits[0][:7],
		9:  "0~git10." + commits[9][:7],
		10: "0.1.0",
		11: "0.1.0+git1." + commits[11][:7],
		21: "0.1.0+git11." + commits[21][:7],
		23: "0.2.0",
		24: "0.2.0+dirty",
	} {
		if !strings.HasPrefix(versions[i], want) {
			t.Errorf("commit %d: version %s, want %s…", i+1, versions[i], want)
		}
	}
	for i := 1; i < len(versions); i++ {
		if err := exec.Command("dpkg", "--compare-versions", versions[i-1], "lt", versions[i]).Run(); err != nil {
			t.Errorf("dpkg: %s is not older than the next commit's %s", versions[i-1], versions[i])
		}
	}
	t.Logf("versions: %s", strings.Join(versions, " "))
}
