package fakeserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
)

// LoadError is what [LoadScript], [LoadSeed] and [Server.Seed] return for
// a bad script or seed: where it is wrong and why. Find it with errors.As.
type LoadError struct {
	// Doc is "script" or "seed".
	Doc string
	// Path names the value at fault: "rules[1].retry_after.form",
	// "blobs[0].name", "blobs[2]" for an entry as a whole, a top-level key
	// ("rules", "comment"), or "" for the document as a whole.
	Path string
	// Line and Column are 1-based: where the JSON decoder stopped (a syntax
	// error, a value of the wrong type), else the start of the entry at
	// fault. 0 when unknown, as for a Seed built in Go.
	Line, Column int
	// Msg says what is wrong.
	Msg string

	off int64 // before placing: the byte offset in the entry at fault
}

func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString(e.Doc + ": ")
	switch {
	case e.Path != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s (line %d, column %d): ", e.Path, e.Line, e.Column)
	case e.Path != "":
		b.WriteString(e.Path + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d, column %d: ", e.Line, e.Column)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// pathErr is an error of a decoded value before it is placed in its file:
// path is relative to the entry ("retry_after.form", "" for the entry).
func pathErr(path, msg string) *LoadError { return &LoadError{Path: path, Msg: msg} }

// jsonDoc reads one script or seed: a JSON object whose keys are "comment"
// (a string) and the arrays named in lists. Each array element is decoded
// by its list's function into a typed struct, so that an error names the
// element's index and line.
type jsonDoc struct {
	doc  string // "script" or "seed"
	data []byte
	// maxEntries bounds each array.
	maxEntries int
	// seen holds the top-level keys read.
	seen map[string]bool
}

// read walks the top-level object with the decoder's own tokens and hands
// each array element to lists[key]. A key outside lists and "comment", a
// key given twice, or a document that is not one valid JSON object is an
// error.
func (d *jsonDoc) read(hint string, lists map[string]func(raw []byte) *LoadError) *LoadError {
	if !json.Valid(d.data) {
		return d.syntaxError()
	}
	dec := json.NewDecoder(bytes.NewReader(d.data))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return d.at("", 0, hint)
	}
	d.seen = map[string]bool{}
	for dec.More() {
		tok, _ := dec.Token() // valid JSON: a key
		key, _ := tok.(string)
		keyEnd := dec.InputOffset()
		each, ok := lists[key]
		switch {
		case d.seen[key]:
			return d.at(key, keyEnd-1, "duplicate key")
		case key == "comment":
			var c string
			if err := dec.Decode(&c); err != nil {
				return d.at(key, keyEnd-1, "want a string")
			}
		case !ok:
			want := `"` + strings.Join(slices.Sorted(maps.Keys(lists)), `", "`) + `" or "comment"`
			return d.at(fmt.Sprintf("%q", key), keyEnd-1, "unknown top-level key (want "+want+")")
		default:
			if tok, _ := dec.Token(); tok != json.Delim('[') {
				return d.at(key, keyEnd-1, "want an array")
			}
			for i := 0; dec.More(); i++ {
				var raw json.RawMessage
				_ = dec.Decode(&raw) // valid JSON
				start := dec.InputOffset() - int64(len(raw))
				if i == d.maxEntries {
					return d.at(fmt.Sprintf("%s[%d]", key, i), start, fmt.Sprintf("more than %d entries", d.maxEntries))
				}
				if e := each(raw); e != nil {
					return d.at(e.in(key, i).Path, start+e.off, e.Msg)
				}
			}
			_, _ = dec.Token() // ']'
		}
		d.seen[key] = true
	}
	return nil
}

// at is an error at byte offset off of the document.
func (d *jsonDoc) at(path string, off int64, msg string) *LoadError {
	off = min(max(off, 0), int64(len(d.data)))
	before := d.data[:off]
	line := 1 + bytes.Count(before, []byte("\n"))
	col := 1 + len(before) - (bytes.LastIndexByte(before, '\n') + 1)
	return &LoadError{Doc: d.doc, Path: path, Line: line, Column: col, Msg: msg}
}

// syntaxError places the JSON syntax error of the document at the byte the
// decoder stopped on, or after the last byte for an unexpected end.
func (d *jsonDoc) syntaxError() *LoadError {
	err := json.NewDecoder(bytes.NewReader(d.data)).Decode(new(any))
	if err == nil { // one value, then more: Unmarshal names what follows
		err = json.Unmarshal(d.data, new(any))
	}
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return d.at("", int64(len(d.data)), "invalid JSON: unexpected end of JSON input")
	case errors.As(err, &se):
		return d.at("", se.Offset-1, "invalid JSON: "+se.Error()) // Offset counts the offending byte
	}
	return d.at("", 0, "invalid JSON")
}

// entry is the decoder of a list's entries: raw into a J, converted to a
// T, checked against those before it and appended to list.
func entry[J, T any](list *[]T, conv func(*J) (T, *LoadError), check func(T, []T) *LoadError) func([]byte) *LoadError {
	return func(raw []byte) *LoadError {
		var j J
		if e := decodeStrict(raw, &j); e != nil {
			return e
		}
		v, e := conv(&j)
		if e == nil {
			e = check(v, *list)
		}
		*list = append(*list, v)
		return e
	}
}

// decodeStrict decodes one entry, raw, into v (a pointer to a struct with
// json tags) with unknown fields refused. A value of the wrong type is
// named by its path and the offset in raw where the decoder stopped; an
// unknown field by its path.
func decodeStrict(raw []byte, v any) *LoadError {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		e := pathErr(strings.ReplaceAll(te.Field, "contentJSON.", ""), "want "+jsonKind(te.Type))
		if te.Field != "" { // a field: where its value ends; the entry: where it starts
			e.off = max(te.Offset-1, 0)
		}
		return e
	}
	// DisallowUnknownFields says only the key: find its path.
	if path := unknownField(raw, reflect.TypeOf(v).Elem()); path != "" {
		return pathErr(path, "unknown field")
	}
	return pathErr("", err.Error())
}

// jsonKind names what a Go type of the decoded structs takes in JSON.
func jsonKind(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "an array of " + strings.TrimPrefix(jsonKind(t.Elem()), "a ") + "s"
	default:
		return "a JSON object"
	}
}

// unknownField returns the path of the first key of raw (a JSON object)
// that t, a struct type with json tags, has no field for, looking into the
// fields that are structs themselves; "" when there is none.
func unknownField(raw []byte, t reflect.Type) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return ""
	}
	fields := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) { // an embedded struct's fields too
		if !f.Anonymous {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields[strings.ToLower(name)] = f.Type
		}
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		ft, ok := fields[strings.ToLower(k)] // encoding/json matches keys without case
		if !ok {
			return k
		}
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			if sub := unknownField(obj[k], ft); sub != "" {
				return k + "." + sub
			}
		}
	}
	return ""
}

// loadFile reads the file at path with load; errors name the file.
func loadFile[T any](path string, load func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close()
	v, err := load(f)
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// readLimited reads at most limit bytes of r; more is an error of doc.
func readLimited(r io.Reader, limit int64, doc string) ([]byte, error) {
	data, err := readAtMost(r, limit)
	if errors.Is(err, errBodyTooLarge) {
		return nil, &LoadError{Doc: doc, Msg: fmt.Sprintf("larger than %d bytes", limit)}
	}
	return data, err
}
