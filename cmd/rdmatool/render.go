package main

import (
	"bufio"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
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
	// the row type's fields, parsed once
	rowType    reflect.Type
	textFields []textField
	jsonFields []jsonField // nil: encoding/json writes this type
}

func newListWriter(w io.Writer, g *globals) *listWriter {
	return &listWriter{w: bufio.NewWriterSize(w, 64*1024), json: g.json, pretty: g.pretty, details: g.details}
}

// row writes one row: a struct, or a pointer to one.
func (l *listWriter) row(v any) error {
	rv := reflect.Indirect(reflect.ValueOf(v))
	if rv.Type() != l.rowType {
		l.rowType = rv.Type()
		l.textFields, l.jsonFields = textFields(l.rowType), jsonFieldsOf(l.rowType)
	}
	if l.json {
		sep := ","
		if l.n == 0 {
			sep = "["
		}
		if a, ok := v.(jsonAppender); ok && !l.pretty {
			l.n++
			_, err := l.w.Write(a.appendJSON(append(l.w.AvailableBuffer(), sep...)))
			return err
		}
		if l.jsonFields != nil && !l.pretty {
			l.n++
			b := append(l.w.AvailableBuffer(), sep...)
			_, err := l.w.Write(appendJSONRow(b, rv, l.jsonFields))
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
	l.n++
	l.w.WriteString(textLineFields(rv, l.textFields, l.details))
	return l.w.WriteByte('\n')
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
		b.WriteString(textValue(fv))
	}
	return b.String()
}

// jsonAppender is a row that writes its own JSON, exactly as json.Marshal
// would: the rows a listing has tens of thousands of.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

// jsonField is how one struct field is written as JSON.
type jsonField struct {
	index int
	key   string // `"name":`, with the comma before all but the first
	kind  reflect.Kind
}

// jsonFieldsOf prepares a flat row type (strings, unsigned and signed
// integers, bools, no tag options) for appendJSONRow; nil for any other
// type, which encoding/json then writes. Listings of 60k rows spend most of
// their time in the encoder otherwise: encoding/json costs about 1.5 us and
// 4 allocations a QP row, this a few hundred ns and none.
func jsonFieldsOf(rt reflect.Type) []jsonField {
	if rt.Kind() != reflect.Struct {
		return nil
	}
	var out []jsonField
	for i := range rt.NumField() {
		f := rt.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if opts != "" || name == "" || !plainJSONString(name) {
			return nil
		}
		if f.Type.Implements(marshalerType) || reflect.PointerTo(f.Type).Implements(marshalerType) ||
			f.Type.Implements(textMarshalerType) || reflect.PointerTo(f.Type).Implements(textMarshalerType) {
			return nil
		}
		switch k := f.Type.Kind(); k {
		case reflect.String, reflect.Bool,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
			reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			key := `"` + name + `":`
			if len(out) > 0 {
				key = "," + key
			}
			out = append(out, jsonField{index: i, key: key, kind: k})
		default:
			return nil
		}
	}
	return out
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// appendJSONRow appends rv as json.Marshal would write it.
func appendJSONRow(b []byte, rv reflect.Value, fields []jsonField) []byte {
	b = append(b, '{')
	for _, f := range fields {
		b = append(b, f.key...)
		fv := rv.Field(f.index)
		switch f.kind {
		case reflect.String:
			b = appendJSONString(b, fv.String())
		case reflect.Bool:
			b = strconv.AppendBool(b, fv.Bool())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			b = strconv.AppendInt(b, fv.Int(), 10)
		default:
			b = strconv.AppendUint(b, fv.Uint(), 10)
		}
	}
	return append(b, '}')
}

// appendJSONString writes printable ASCII as is and hands anything else
// (escapes, HTML characters, UTF-8, invalid bytes) to encoding/json, so
// the output is always exactly its.
func appendJSONString(b []byte, s string) []byte {
	if plainJSONString(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// plainJSONString reports whether s needs no escaping by encoding/json.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
