package fakeserver

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Limits of a seed.
const (
	maxSeedEntries    = 100000 // entries of one section
	maxIndexNameLen   = 128
	maxContainerLen   = 256
	maxBlobNameLen    = 1024
	defaultBlobType   = "application/octet-stream"
	jsonBlobType      = "application/json"
	seedSectionHint   = `"indexes", "files", "blobs" or "comment"`
	seedContentFields = "content, content_base64 or json"
)

// maxSeedSize bounds the bytes of a seed; a variable so that a test can
// lower it.
var maxSeedSize = 64 << 20

// ErrSeedProxy is returned by [Server.Seed] on a proxy ([NewProxy]): its
// state is the upstream's, and there is nothing in memory to seed.
var ErrSeedProxy = errors.New("fakeserver: a proxy has no in-memory state to seed")

// Seed is the state a [Server] starts from: Search indexes, File service
// files and Blob blobs, stored by [Server.Seed] without a request (so
// nothing enters the ledger and no script rule counts them). [LoadSeed]
// reads one from JSON, for the command's --seed flag.
type Seed struct {
	Indexes []SeedIndex
	Files   []SeedFile
	Blobs   []SeedBlob
}

// SeedIndex is one Search index definition.
type SeedIndex struct {
	// Name is the index name: 1 to 128 bytes, without "/" or "'".
	Name string
	// Definition is one JSON object; a "name" in it must equal Name.
	Definition []byte
}

// SeedFile is one file of the File service's inventory, stored in order as
// if uploaded.
type SeedFile struct {
	// Name is the upload's x-ms-file-name; "" for none.
	Name string
	// Content is the file's bytes.
	Content []byte
}

// SeedBlob is one blob.
type SeedBlob struct {
	// Container is the container name: not "", without "/", and not
	// "indexes", "files" or "_fakeserver", which the fake's routes take.
	Container string
	// Name is the blob name (it may hold "/"): 1 to 1024 bytes without
	// control characters.
	Name string
	// Content is the blob's bytes.
	Content []byte
	// ContentType is the Content-Type a GET answers; "" is
	// application/octet-stream.
	ContentType string
}

// SeedError is what [LoadSeed] and [Server.Seed] return for a bad seed:
// where it is wrong and why. Find it with errors.As.
type SeedError struct {
	// Section is "indexes", "files" or "blobs"; "" when the error is not
	// about one entry (invalid JSON, an unknown top-level key).
	Section string
	// Index is the 0-based index of the entry in Section; -1 when Section
	// is "".
	Index int
	// Field is the entry's field at fault, such as "container" or
	// "content_base64"; "" for the entry as a whole. For a top-level
	// error, the key at fault, quoted, or "".
	Field string
	// Line and Column are 1-based: the position of a syntax error, or the
	// start of the entry or key at fault (Column then 0). 0 when unknown,
	// as for a Seed built in Go.
	Line, Column int
	// Msg says what is wrong.
	Msg string
}

func (e *SeedError) Error() string {
	var b strings.Builder
	if e.Section != "" {
		fmt.Fprintf(&b, "%s[%d]", e.Section, e.Index)
		if e.Field != "" {
			b.WriteString("." + e.Field)
		}
		if e.Line > 0 {
			fmt.Fprintf(&b, " (line %d)", e.Line)
		}
	} else {
		b.WriteString(e.Field)
		switch {
		case e.Line > 0 && e.Column > 0:
			fmt.Fprintf(&b, " line %d, column %d", e.Line, e.Column)
		case e.Line > 0:
			fmt.Fprintf(&b, " (line %d)", e.Line)
		}
	}
	where := strings.TrimSpace(b.String())
	if where == "" {
		return "seed: " + e.Msg
	}
	return "seed: " + where + ": " + e.Msg
}

// LoadSeedFile reads a JSON seed file (see [LoadSeed]). Errors name the
// file; a *SeedError inside is found with errors.As.
func LoadSeedFile(path string) (*Seed, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seed, err := LoadSeed(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return seed, nil
}

// LoadSeed reads a JSON seed (the format is in the package documentation)
// of at most 64 MiB. A bad seed returns a *SeedError naming the section,
// the entry's index and the field, with the entry's line, or the line and
// column of a JSON syntax error. Unknown keys are errors, so that a typo
// does not silently seed nothing. A seed that loads is accepted whole by
// [Server.Seed].
func LoadSeed(r io.Reader) (*Seed, error) {
	data, err := io.ReadAll(io.LimitReader(r, int64(maxSeedSize)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxSeedSize {
		return nil, &SeedError{Index: -1, Msg: fmt.Sprintf("larger than %d bytes", maxSeedSize)}
	}
	if !json.Valid(data) {
		se := syntaxError(data)
		return nil, &SeedError{Index: -1, Line: se.Line, Column: se.Column,
			Msg: strings.Replace(se.Msg, "the script object", "the seed object", 1)}
	}
	sections, serr := splitSeed(data)
	if serr != nil {
		return nil, serr
	}
	seed := &Seed{}
	for _, raw := range sections["indexes"] {
		ix, serr := decodeSeedIndex(raw.data)
		if serr == nil {
			serr = checkSeedIndex(ix, seed.Indexes)
		}
		if serr != nil {
			return nil, serr.at("indexes", len(seed.Indexes), raw.line)
		}
		seed.Indexes = append(seed.Indexes, ix)
	}
	for _, raw := range sections["files"] {
		f, serr := decodeSeedFile(raw.data)
		if serr == nil {
			serr = checkSeedFile(f)
		}
		if serr != nil {
			return nil, serr.at("files", len(seed.Files), raw.line)
		}
		seed.Files = append(seed.Files, f)
	}
	for _, raw := range sections["blobs"] {
		b, serr := decodeSeedBlob(raw.data)
		if serr == nil {
			serr = checkSeedBlob(b, seed.Blobs)
		}
		if serr != nil {
			return nil, serr.at("blobs", len(seed.Blobs), raw.line)
		}
		seed.Blobs = append(seed.Blobs, b)
	}
	return seed, nil
}

// Seed stores seed's indexes, files and blobs, without requests: nothing
// enters the ledger and no script rule counts them. It checks the whole
// seed first and stores nothing when an entry is bad (a *SeedError naming
// it). Seeding adds to what the server holds: an index or blob of the same
// name is replaced, files are appended to the inventory in order. A nil
// seed stores nothing. On a proxy it returns [ErrSeedProxy].
func (s *Server) Seed(seed *Seed) error {
	if s.proxy != nil {
		return ErrSeedProxy
	}
	if seed == nil {
		return nil
	}
	if serr := seed.check(); serr != nil {
		return serr
	}
	for _, ix := range seed.Indexes {
		if err := s.PutIndex(ix.Name, ix.Definition); err != nil { // unreachable: checked
			return err
		}
	}
	now := s.now()
	for _, f := range seed.Files {
		s.addFile(f.Name, f.Content, now)
	}
	for _, b := range seed.Blobs {
		s.putBlob(b.Container, b.Name, b.Content, b.ContentType)
	}
	return nil
}

// check validates a Seed built in Go.
func (seed *Seed) check() *SeedError {
	for i, ix := range seed.Indexes {
		if err := checkSeedIndex(ix, seed.Indexes[:i]); err != nil {
			return err.at("indexes", i, 0)
		}
	}
	for i, f := range seed.Files {
		if err := checkSeedFile(f); err != nil {
			return err.at("files", i, 0)
		}
	}
	for i, b := range seed.Blobs {
		if err := checkSeedBlob(b, seed.Blobs[:i]); err != nil {
			return err.at("blobs", i, 0)
		}
	}
	return nil
}

func (e *SeedError) at(section string, i, line int) *SeedError {
	e.Section, e.Index, e.Line = section, i, line
	return e
}

func seedErr(field, msg string) *SeedError { return &SeedError{Field: field, Msg: msg} }

// fromScript converts an error of the shared field decoders.
func fromScript(e *ScriptError) *SeedError { return seedErr(e.Field, e.Msg) }

func checkSeedIndex(ix SeedIndex, before []SeedIndex) *SeedError {
	switch {
	case ix.Name == "":
		return seedErr("name", "required")
	case len(ix.Name) > maxIndexNameLen:
		return seedErr("name", fmt.Sprintf("longer than %d bytes", maxIndexNameLen))
	case strings.ContainsAny(ix.Name, "/'") || hasControl(ix.Name):
		return seedErr("name", fmt.Sprintf("index name %q holds \"/\", \"'\" or a control character", ix.Name))
	}
	for j, o := range before {
		if o.Name == ix.Name {
			return seedErr("name", fmt.Sprintf("index %q already seeded by indexes[%d]", ix.Name, j))
		}
	}
	var def map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(ix.Definition))
	if err := dec.Decode(&def); err != nil || def == nil || dec.More() {
		return seedErr("definition", "want one JSON object")
	}
	if raw, ok := def["name"]; ok {
		var n string
		if err := json.Unmarshal(raw, &n); err != nil || n != ix.Name {
			return seedErr("definition", fmt.Sprintf("its \"name\" differs from the index name %q", ix.Name))
		}
	}
	return nil
}

func checkSeedFile(f SeedFile) *SeedError {
	if len(f.Name) > maxFileNameLen || strings.ContainsAny(f.Name, "\x00\r\n") {
		return seedErr("name", fmt.Sprintf("longer than %d bytes or holds NUL, CR or LF", maxFileNameLen))
	}
	return nil
}

func checkSeedBlob(b SeedBlob, before []SeedBlob) *SeedError {
	switch {
	case b.Container == "":
		return seedErr("container", "required")
	case len(b.Container) > maxContainerLen:
		return seedErr("container", fmt.Sprintf("longer than %d bytes", maxContainerLen))
	case strings.Contains(b.Container, "/") || hasControl(b.Container):
		return seedErr("container", fmt.Sprintf("container %q holds \"/\" or a control character", b.Container))
	case b.Container == "indexes" || b.Container == "files" || "/"+b.Container+"/" == AdminPrefix:
		return seedErr("container", fmt.Sprintf("container %q is taken by the fake's own routes: no request could reach it", b.Container))
	case b.Name == "":
		return seedErr("name", "required")
	case len(b.Name) > maxBlobNameLen:
		return seedErr("name", fmt.Sprintf("longer than %d bytes", maxBlobNameLen))
	case hasControl(b.Name):
		return seedErr("name", "holds a control character")
	case len(b.ContentType) > 256 || hasControl(b.ContentType):
		return seedErr("content_type", "longer than 256 bytes or holds a control character")
	}
	for j, o := range before {
		if o.Container == b.Container && o.Name == b.Name {
			return seedErr("name", fmt.Sprintf("blob %q already seeded by blobs[%d]", b.Container+"/"+b.Name, j))
		}
	}
	return nil
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f })
}

// Fields of the seed's entries.
var (
	seedIndexFields = []string{"comment", "name", "definition"}
	seedFileFields  = []string{"comment", "name", "content", "content_base64", "json"}
	seedBlobFields  = []string{"comment", "container", "name", "content", "content_base64", "json", "content_type"}
)

func decodeSeedIndex(data []byte) (SeedIndex, *SeedError) {
	var ix SeedIndex
	obj, err := decodeObject(data, "", seedIndexFields)
	if err != nil {
		return ix, fromScript(err)
	}
	if ix.Name, err = obj.str("name", true); err != nil {
		return ix, fromScript(err)
	}
	def, ok := obj["definition"]
	if !ok {
		return ix, seedErr("definition", "required")
	}
	if trimmed := bytes.TrimSpace(def); len(trimmed) == 0 || trimmed[0] != '{' {
		return ix, seedErr("definition", "want a JSON object")
	}
	ix.Definition = bytes.Clone(def)
	return ix, nil
}

func decodeSeedFile(data []byte) (SeedFile, *SeedError) {
	var f SeedFile
	obj, err := decodeObject(data, "", seedFileFields)
	if err != nil {
		return f, fromScript(err)
	}
	if f.Name, err = obj.str("name", false); err != nil {
		return f, fromScript(err)
	}
	var serr *SeedError
	f.Content, _, serr = obj.content()
	return f, serr
}

func decodeSeedBlob(data []byte) (SeedBlob, *SeedError) {
	var b SeedBlob
	obj, err := decodeObject(data, "", seedBlobFields)
	if err != nil {
		return b, fromScript(err)
	}
	if b.Container, err = obj.str("container", true); err != nil {
		return b, fromScript(err)
	}
	if b.Name, err = obj.str("name", true); err != nil {
		return b, fromScript(err)
	}
	if b.ContentType, err = obj.str("content_type", false); err != nil {
		return b, fromScript(err)
	}
	content, field, serr := obj.content()
	if serr != nil {
		return b, serr
	}
	b.Content = content
	if b.ContentType == "" && field == "json" {
		b.ContentType = jsonBlobType
	}
	return b, nil
}

// content decodes the one content field of an entry: "content" (text),
// "content_base64" (standard base64) or "json" (any JSON value, stored
// compacted). It returns the field used.
func (obj object) content() ([]byte, string, *SeedError) {
	var field string
	for _, k := range []string{"content", "content_base64", "json"} {
		if _, ok := obj[k]; !ok {
			continue
		}
		if field != "" {
			return nil, "", seedErr(k, fmt.Sprintf("excludes %s: give one of %s", field, seedContentFields))
		}
		field = k
	}
	switch field {
	case "":
		return nil, "", seedErr("", fmt.Sprintf("no content: give one of %s (\"content\": \"\" for an empty one)", seedContentFields))
	case "content":
		s, err := obj.str("content", true)
		if err != nil {
			return nil, "", fromScript(err)
		}
		return []byte(s), field, nil
	case "content_base64":
		s, err := obj.str("content_base64", true)
		if err != nil {
			return nil, "", fromScript(err)
		}
		b, derr := base64.StdEncoding.DecodeString(s)
		if derr != nil {
			return nil, "", seedErr("content_base64", "not standard base64 (RFC 4648, with padding)")
		}
		return b, field, nil
	default: // json
		var buf bytes.Buffer
		if err := json.Compact(&buf, obj["json"]); err != nil { // unreachable: the seed is valid JSON
			return nil, "", seedErr("json", "invalid JSON")
		}
		return buf.Bytes(), field, nil
	}
}

// splitSeed walks the top-level object (already valid JSON) and returns the
// entries of each section with the line each starts on.
func splitSeed(data []byte) (map[string][]rawRule, *SeedError) {
	dec := json.NewDecoder(bytes.NewReader(data))
	at := func() int { line, _ := position(data, skipSpace(data, int(dec.InputOffset()))); return line }
	tok, _ := dec.Token()
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, &SeedError{Index: -1, Line: 1, Msg: `a seed is a JSON object: {"indexes": [...], "files": [...], "blobs": [...]}`}
	}
	sections := map[string][]rawRule{}
	seen := map[string]bool{}
	for dec.More() {
		line := at()
		tok, _ := dec.Token()
		key, _ := tok.(string)
		if seen[key] {
			return nil, &SeedError{Index: -1, Field: strconv.Quote(key), Line: line, Msg: "duplicate key"}
		}
		seen[key] = true
		switch key {
		case "comment":
			var c string
			if err := dec.Decode(&c); err != nil {
				return nil, &SeedError{Index: -1, Field: `"comment"`, Line: line, Msg: "want a string"}
			}
		case "indexes", "files", "blobs":
			tok, _ := dec.Token()
			if d, ok := tok.(json.Delim); !ok || d != '[' {
				return nil, &SeedError{Index: -1, Field: strconv.Quote(key), Line: line, Msg: "want an array"}
			}
			list := []rawRule{}
			for dec.More() {
				line := at()
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil { // unreachable: data is valid
					return nil, &SeedError{Section: key, Index: len(list), Line: line, Msg: err.Error()}
				}
				if len(list) == maxSeedEntries {
					return nil, &SeedError{Section: key, Index: len(list), Line: line, Msg: fmt.Sprintf("more than %d entries", maxSeedEntries)}
				}
				list = append(list, rawRule{data: raw, line: line})
			}
			_, _ = dec.Token() // ']'
			sections[key] = list
		default:
			return nil, &SeedError{Index: -1, Field: strconv.Quote(key), Line: line, Msg: "unknown top-level key (want " + seedSectionHint + ")"}
		}
	}
	return sections, nil
}
