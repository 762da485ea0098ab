package docs

import (
	"strings"
	"testing"
)

func TestPage(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"agent", "naming", "reset", "rules"} {
		p := Page(name)
		if p == "" || strings.HasPrefix(p, "# ") || p != strings.TrimSpace(p) {
			t.Errorf("Page(%q) = %.40q..., want the page without its title", name, p)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Page of a missing page did not panic")
		}
	}()
	Page("lab") // in the repository, not embedded
}
