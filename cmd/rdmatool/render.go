package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
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
}

func newListWriter(w io.Writer, g *globals) *listWriter {
	return &listWriter{w: bufio.NewWriterSize(w, 64*1024), json: g.json, pretty: g.pretty, details: g.details}
}

func (l *listWriter) row(v any) error {
	if l.json {
		sep := ","
		if l.n == 0 {
			sep = "["
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
	l.n++
	_, err := l.w.WriteString(textLine(v, l.details) + "\n")
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

// textLine renders a row's fields in order as "name value" pairs. Struct tag
// txt:"lead" prints the value alone at the start, txt:"nz" prints only a
// non-zero value, txt:"d" only with -d, txt:"-" never.
func textLine(v any, details bool) string {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	rt := rv.Type()
	var parts []string
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		opts := f.Tag.Get("txt")
		fv := rv.Field(i)
		switch {
		case opts == "-" || (name == "" || name == "-") && !strings.Contains(opts, "lead"):
			continue
		case strings.Contains(opts, "d") && !details:
			continue
		case strings.Contains(opts, "nz") && fv.IsZero():
			continue
		}
		val := fmt.Sprint(fv.Interface())
		if s, ok := fv.Interface().(fmt.Stringer); ok {
			val = s.String()
		}
		if fv.Kind() == reflect.Slice {
			if fv.Len() == 0 {
				continue
			}
			items := make([]string, fv.Len())
			for j := range fv.Len() {
				items[j] = fmt.Sprint(fv.Index(j).Interface())
			}
			val = strings.Join(items, ",")
		}
		if strings.Contains(opts, "lead") {
			parts = append(parts, val)
			continue
		}
		parts = append(parts, strings.ReplaceAll(name, "_", "-")+" "+val)
	}
	return strings.Join(parts, " ")
}
