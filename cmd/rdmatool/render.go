package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/rdmatool/rdmatool/internal/quote"
)

// listWriter prints a listing row by row: one JSON array for the whole
// output (like iproute2's -j), or one line of "name value" pairs per row for
// people, using the same words as the JSON. Rows are written as they come,
// so a dump of 60k QPs is never held in memory.
type listWriter struct {
	w       *bufio.Writer
	json    bool
	pretty  bool
	details bool
	n       int
	// the row type's text fields, parsed once
	rowType    reflect.Type
	textFields []textField
}

func newListWriter(w io.Writer, g *globals) *listWriter {
	return &listWriter{w: bufio.NewWriterSize(w, 64*1024), json: g.json, pretty: g.pretty, details: g.details}
}

// row writes one row: a struct, or a pointer to one.
func (l *listWriter) row(v any) error {
	if l.json {
		return l.jsonRow(v)
	}
	rv := reflect.Indirect(reflect.ValueOf(v))
	if rv.Type() != l.rowType {
		l.rowType = rv.Type()
		l.textFields = textFields(l.rowType)
	}
	l.n++
	l.w.WriteString(textLineFields(rv, l.textFields, l.details))
	return l.w.WriteByte('\n')
}

// jsonRow writes one row as an element of the listing's array: compact
// through the row's own appendJSON when it has one, through encoding/json
// otherwise and with -p.
func (l *listWriter) jsonRow(v any) error {
	sep := ","
	if l.n == 0 {
		sep = "["
	}
	if a, ok := v.(jsonAppender); ok && !l.pretty {
		l.n++
		_, err := l.w.Write(a.appendJSON(append(l.w.AvailableBuffer(), sep...)))
		return err
	}
	var b []byte
	var err error
	if l.pretty {
		b, err = json.MarshalIndent(v, "  ", "  ")
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return err
	}
	l.n++
	if l.pretty {
		sep += "\n  "
	}
	if _, err := l.w.WriteString(sep); err != nil {
		return err
	}
	_, err = l.w.Write(b)
	return err
}

// close ends the listing; an empty JSON listing is [].
func (l *listWriter) close() error {
	if l.json {
		end := "]\n"
		if l.n == 0 {
			end = "[]\n"
		} else if l.pretty {
			end = "\n]\n"
		}
		if _, err := l.w.WriteString(end); err != nil {
			return err
		}
	}
	return l.w.Flush()
}

// textField is how one struct field prints in text mode, from its tags.
type textField struct {
	index   int
	name    string // "rq-psn"
	lead    bool   // txt:"lead": the value alone, no name
	nonZero bool   // txt:"nz": only when not zero
	details bool   // txt:"d": only with -d
}

// textFields parses a row type's tags once per listing. Struct tag
// txt:"lead" prints the value alone at the start, txt:"nz" prints only a
// non-zero value, txt:"d" only with -d, txt:"-" never.
func textFields(rt reflect.Type) []textField {
	var out []textField
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		opts := strings.Split(f.Tag.Get("txt"), ",")
		lead := slices.Contains(opts, "lead")
		if slices.Contains(opts, "-") || (name == "" || name == "-") && !lead {
			continue
		}
		out = append(out, textField{
			index: i, name: strings.ReplaceAll(name, "_", "-"), lead: lead,
			nonZero: slices.Contains(opts, "nz"), details: slices.Contains(opts, "d"),
		})
	}
	return out
}

// textValue formats one field value: numbers in decimal, Stringers by
// String, slices joined by commas.
func textValue(fv reflect.Value) string {
	if s, ok := fv.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	switch fv.Kind() {
	case reflect.String:
		return fv.String()
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(fv.Uint(), 10)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(fv.Int(), 10)
	case reflect.Bool:
		return strconv.FormatBool(fv.Bool())
	case reflect.Slice:
		items := make([]string, fv.Len())
		for j := range fv.Len() {
			items[j] = textValue(fv.Index(j))
		}
		return strings.Join(items, ",")
	}
	return fmt.Sprint(fv.Interface())
}

// textLine renders a row's fields in order as "name value" pairs.
func textLine(v any, details bool) string {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	return textLineFields(rv, textFields(rv.Type()), details)
}

func textLineFields(rv reflect.Value, fields []textField, details bool) string {
	var b strings.Builder
	for _, f := range fields {
		fv := rv.Field(f.index)
		// Zero-valued nz and lead fields, empty strings (a field the kernel
		// did not send) and empty lists are left out.
		if f.details && !details || (f.nonZero || f.lead) && fv.IsZero() ||
			fv.Kind() == reflect.String && fv.Len() == 0 || fv.Kind() == reflect.Slice && fv.Len() == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if !f.lead {
			b.WriteString(f.name)
			b.WriteByte(' ')
		}
		// What the kernel and /proc name (devices, commands, modules)
		// can hold any byte: escaped, so a row stays one line.
		b.WriteString(quote.Text(textValue(fv)))
	}
	return b.String()
}

// jsonAppender is a row that writes its own JSON through jsonw, byte for
// byte as encoding/json writes it (TestJSONRowsAsEncodingJSON holds them
// equal): the resource rows of `res`, which a busy host has tens of
// thousands of. Rows a host has a few of (devices, ports, the summary) and
// the SRQ rows, which hold lists, are written by encoding/json.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}
