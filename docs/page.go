package docs

import (
	"embed"
	"strings"
)

//go:embed agent.md naming.md reset.md rules.md
var pages embed.FS

// Page returns the page name.md without its title line, as a command's
// help text. The pages are fixed when rdmatool is built, so a name
// without a page is a bug: Page panics on it.
func Page(name string) string {
	b, err := pages.ReadFile(name + ".md")
	if err != nil {
		panic("docs: no page " + name + ".md")
	}
	text := string(b)
	if strings.HasPrefix(text, "# ") {
		_, text, _ = strings.Cut(text, "\n")
	}
	return strings.TrimSpace(text)
}
