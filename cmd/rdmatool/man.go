package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rdmatool/rdmatool/internal/quote"
)

// Man pages are written here rather than by cobra/doc: its Markdown
// renderer (go-md2man on blackfriday) builds tables of HTML entities in
// its package initialization, which every rdmatool command paid for at
// start, udev's rename included. The help texts are the small Markdown of
// docs/ (paragraphs, "##" headings, "-" lists, indented blocks, `code`
// and **bold**), which manRoff turns into roff.

// manHeader is what a page's .TH line says.
type manHeader struct {
	title, section, date, source, manual string
}

// writeManTree writes a page for cmd and each of its subcommands (but the
// hidden ones and help) into dir, named as cobra/doc names them
// ("rdmatool-res.8"). Each page is written beside its name and renamed
// onto it, so a link already in dir is replaced, not followed.
func writeManTree(cmd *cobra.Command, h manHeader, dir string) error {
	if !cmd.IsAvailableCommand() && cmd.HasParent() {
		return nil
	}
	for _, c := range cmd.Commands() {
		if err := writeManTree(c, h, dir); err != nil {
			return err
		}
	}
	name := strings.ReplaceAll(cmd.CommandPath(), " ", "-") + "." + h.section
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(manPage(cmd, h))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// manDate is the date pages carry: SOURCE_DATE_EPOCH's when set (a
// reproducible build), else today's. A SOURCE_DATE_EPOCH that is not a
// count of seconds from 1970 to 9999 is an error, not today's date.
func manDate() (string, error) {
	t := time.Now()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil || sec < 0 || sec > maxEpoch {
			return "", fmt.Errorf("SOURCE_DATE_EPOCH %s: want the seconds since 1970 (0 to %d)", quote.String(s), maxEpoch)
		}
		t = time.Unix(sec, 0)
	}
	return t.UTC().Format("Jan 2006"), nil
}

// maxEpoch is the last second of the year 9999, the last a page's date
// has four digits for.
const maxEpoch = 253402300799

// manPage renders one command's page.
func manPage(cmd *cobra.Command, h manHeader) []byte {
	cmd.InitDefaultHelpFlag()
	var b bytes.Buffer
	fmt.Fprintf(&b, ".nh\n.TH %s %s %s %s %s\n", manQuote(h.title), manQuote(h.section), manQuote(h.date), manQuote(h.source), manQuote(h.manual))
	name := strings.ReplaceAll(cmd.CommandPath(), " ", "-")
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", manEscape(name), manEscape(cmd.Short))
	fmt.Fprintf(&b, ".SH SYNOPSIS\n\\fB%s\\fP\n", manEscape(cmd.UseLine()))
	desc := cmd.Long
	if desc == "" {
		desc = cmd.Short
	}
	b.WriteString(".SH DESCRIPTION\n")
	b.WriteString(manRoff(desc))
	if fs := cmd.NonInheritedFlags(); fs.HasAvailableFlags() {
		b.WriteString(".SH OPTIONS\n")
		manFlags(&b, fs)
	}
	if fs := cmd.InheritedFlags(); fs.HasAvailableFlags() {
		b.WriteString(".SH OPTIONS INHERITED FROM PARENT COMMANDS\n")
		manFlags(&b, fs)
	}
	if cmd.Example != "" {
		b.WriteString(".SH EXAMPLE\n.PP\n.RS\n.nf\n" + manEscape(cmd.Example) + "\n.fi\n.RE\n")
	}
	var see []string
	if cmd.HasParent() {
		see = append(see, manRef(cmd.Parent(), h.section))
	}
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			see = append(see, manRef(c, h.section))
		}
	}
	if len(see) > 0 {
		b.WriteString(".SH SEE ALSO\n" + strings.Join(see, ", ") + "\n")
	}
	return b.Bytes()
}

// manRef names another command's page: \fBrdmatool-res(8)\fP.
func manRef(c *cobra.Command, section string) string {
	return `\fB` + manEscape(strings.ReplaceAll(c.CommandPath(), " ", "-")) + "(" + section + `)\fP`
}

// manFlags lists flags as cobra/doc does: \fB-j\fP, \fB--json\fP[=false],
// then the usage, indented.
func manFlags(b *bytes.Buffer, fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		b.WriteString(".PP\n")
		if f.Shorthand != "" && f.ShorthandDeprecated == "" {
			fmt.Fprintf(b, `\fB-%s\fP, `, manEscape(f.Shorthand))
		}
		fmt.Fprintf(b, `\fB--%s\fP`, manEscape(f.Name))
		switch {
		case f.Value.Type() == "string":
			fmt.Fprintf(b, `="%s"`, manEscape(f.DefValue))
		case f.DefValue != "":
			fmt.Fprintf(b, "[=%s]", manEscape(f.DefValue))
		}
		b.WriteString("\n.RS 4\n" + manEscape(f.Usage) + "\n.RE\n")
	})
}

// manQuote quotes a .TH argument.
func manQuote(s string) string {
	return `"` + strings.ReplaceAll(manEscape(s), `"`, `\(dq`) + `"`
}

// manEscape makes text safe in roff: backslashes doubled, and a line that
// would start with a control character (. or ') guarded by \&.
func manEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			lines[i] = `\&` + l
		}
	}
	return strings.Join(lines, "\n")
}

var (
	manCode = regexp.MustCompile("`([^`]+)`")
	manBold = regexp.MustCompile(`\*\*([^*]+)\*\*`)
)

// manInline renders a line of text: `code` and **bold** in bold.
func manInline(s string) string {
	s = manEscape(s)
	s = manCode.ReplaceAllString(s, `\fB$1\fP`)
	return manBold.ReplaceAllString(s, `\fB$1\fP`)
}

// manRoff turns a help text (the Markdown of docs/, or plain paragraphs)
// into roff: "## " and "### " headings are .SS, blank lines part
// paragraphs, "- " items are bulleted, lines indented by four spaces (or
// fenced with ```) are shown as they are. A paragraph's or an item's lines
// are rendered together, so `code` may span them.
func manRoff(md string) string {
	var b strings.Builder
	var text []string // the paragraph or list item being read
	flush := func() {
		if len(text) > 0 {
			b.WriteString(manInline(strings.Join(text, "\n")) + "\n")
			text = nil
		}
	}
	lines := strings.Split(strings.TrimSpace(md), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.TrimSpace(l) == "":
			flush()
		case strings.HasPrefix(l, "```"):
			flush()
			b.WriteString(".PP\n.RS\n.nf\n")
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				b.WriteString(manEscape(lines[i]) + "\n")
			}
			b.WriteString(".fi\n.RE\n")
		case strings.HasPrefix(l, "    ") && len(text) == 0:
			b.WriteString(".PP\n.RS\n.nf\n")
			for ; i < len(lines) && (strings.HasPrefix(lines[i], "    ") || strings.TrimSpace(lines[i]) == "" && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    ")); i++ {
				b.WriteString(manEscape(strings.TrimPrefix(lines[i], "    ")) + "\n")
			}
			i--
			b.WriteString(".fi\n.RE\n")
		case strings.HasPrefix(l, "#"):
			flush()
			b.WriteString(".SS " + manInline(strings.TrimSpace(strings.TrimLeft(l, "#"))) + "\n")
		case strings.HasPrefix(l, "- ") || strings.HasPrefix(l, "* "):
			flush()
			b.WriteString(".IP \\(bu 2\n")
			text = append(text, l[2:])
		case len(text) > 0:
			text = append(text, strings.TrimSpace(l))
		default:
			b.WriteString(".PP\n")
			text = append(text, l)
		}
	}
	flush()
	return b.String()
}
