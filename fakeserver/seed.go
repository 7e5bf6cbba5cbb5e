package fakeserver

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	seedContentFields = "content, content_base64 or json"
)

// maxSeedSize bounds the bytes of a seed; a variable so that a test can
// lower it.
var maxSeedSize = 64 << 20

// ErrSeedProxy is returned by [Server.Seed] on a proxy ([NewProxy]): its
// state is the upstream's, and there is nothing in memory to seed.
var ErrSeedProxy = errors.New("fakeserver: a proxy has no in-memory state to seed")

// Seed is the state a [Server] starts from: Search indexes, File service
// files and Blob blobs, which [Server.Seed] stores. [LoadSeed] reads one
// from JSON, for the command's --seed flag.
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

// LoadSeedFile reads a JSON seed file (see [LoadSeed]). Errors name the
// file; a *LoadError inside is found with errors.As.
func LoadSeedFile(path string) (*Seed, error) { return loadFile(path, LoadSeed) }

// LoadSeed reads a JSON seed of at most 64 MiB (the format is in
// docs/fakeserver.md); a bad one, an unknown key included, is a
// [*LoadError]. A seed that loads is accepted whole by [Server.Seed].
func LoadSeed(r io.Reader) (*Seed, error) {
	data, err := readLimited(r, int64(maxSeedSize), "seed")
	if err != nil {
		return nil, err
	}
	seed := &Seed{}
	doc := &jsonDoc{doc: "seed", data: data, maxEntries: maxSeedEntries}
	if e := doc.read(`a seed is a JSON object: {"indexes": [...], "files": [...], "blobs": [...]}`, map[string]func([]byte) *LoadError{
		"indexes": entry(&seed.Indexes, (*seedIndexJSON).index, checkSeedIndex),
		"files":   entry(&seed.Files, (*seedFileJSON).file, checkSeedFile),
		"blobs":   entry(&seed.Blobs, (*seedBlobJSON).blob, checkSeedBlob),
	}); e != nil {
		return nil, e
	}
	return seed, nil
}

// Seed stores seed's indexes, files and blobs, without requests: nothing
// enters the ledger and no script rule counts them. It checks the whole
// seed first and stores nothing when an entry is bad (a *LoadError naming
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
func (seed *Seed) check() *LoadError {
	if e := checkAll("indexes", seed.Indexes, checkSeedIndex); e != nil {
		return e
	}
	if e := checkAll("files", seed.Files, checkSeedFile); e != nil {
		return e
	}
	return checkAll("blobs", seed.Blobs, checkSeedBlob)
}

// checkAll checks each entry of a section against those before it.
func checkAll[T any](section string, list []T, check func(T, []T) *LoadError) *LoadError {
	for i, v := range list {
		if e := check(v, list[:i]); e != nil {
			return e.in(section, i)
		}
	}
	return nil
}

// in places an entry's error in its section, without a line (as for a
// Seed built in Go).
func (e *LoadError) in(section string, i int) *LoadError {
	path := fmt.Sprintf("%s[%d]", section, i)
	if e.Path != "" {
		path += "." + e.Path
	}
	e.Doc, e.Path = "seed", path
	return e
}

func checkSeedIndex(ix SeedIndex, before []SeedIndex) *LoadError {
	switch {
	case ix.Name == "":
		return pathErr("name", "required")
	case len(ix.Name) > maxIndexNameLen:
		return pathErr("name", fmt.Sprintf("longer than %d bytes", maxIndexNameLen))
	case strings.ContainsAny(ix.Name, "/'") || hasControl(ix.Name):
		return pathErr("name", fmt.Sprintf("index name %q holds \"/\", \"'\" or a control character", ix.Name))
	}
	for j, o := range before {
		if o.Name == ix.Name {
			return pathErr("name", fmt.Sprintf("index %q already seeded by indexes[%d]", ix.Name, j))
		}
	}
	var def map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(ix.Definition))
	if err := dec.Decode(&def); err != nil || def == nil || dec.More() {
		return pathErr("definition", "want one JSON object")
	}
	if raw, ok := def["name"]; ok {
		var n string
		if err := json.Unmarshal(raw, &n); err != nil || n != ix.Name {
			return pathErr("definition", fmt.Sprintf("its \"name\" differs from the index name %q", ix.Name))
		}
	}
	return nil
}

func checkSeedFile(f SeedFile, _ []SeedFile) *LoadError {
	if len(f.Name) > maxFileNameLen || strings.ContainsAny(f.Name, "\x00\r\n") {
		return pathErr("name", fmt.Sprintf("longer than %d bytes or holds NUL, CR or LF", maxFileNameLen))
	}
	return nil
}

func checkSeedBlob(b SeedBlob, before []SeedBlob) *LoadError {
	switch {
	case b.Container == "":
		return pathErr("container", "required")
	case len(b.Container) > maxContainerLen:
		return pathErr("container", fmt.Sprintf("longer than %d bytes", maxContainerLen))
	case strings.Contains(b.Container, "/") || hasControl(b.Container):
		return pathErr("container", fmt.Sprintf("container %q holds \"/\" or a control character", b.Container))
	case b.Container == "indexes" || b.Container == "files" || "/"+b.Container+"/" == AdminPrefix:
		return pathErr("container", fmt.Sprintf("container %q is taken by the fake's own routes: no request could reach it", b.Container))
	case b.Name == "":
		return pathErr("name", "required")
	case len(b.Name) > maxBlobNameLen:
		return pathErr("name", fmt.Sprintf("longer than %d bytes", maxBlobNameLen))
	case hasControl(b.Name):
		return pathErr("name", "holds a control character")
	case len(b.ContentType) > 256 || hasControl(b.ContentType):
		return pathErr("content_type", "longer than 256 bytes or holds a control character")
	}
	for j, o := range before {
		if o.Container == b.Container && o.Name == b.Name {
			return pathErr("name", fmt.Sprintf("blob %q already seeded by blobs[%d]", b.Container+"/"+b.Name, j))
		}
	}
	return nil
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f })
}

// seedIndexJSON is one entry of "indexes".
type seedIndexJSON struct {
	Comment    string          `json:"comment"`
	Name       *string         `json:"name"`
	Definition json.RawMessage `json:"definition"`
}

func (ej *seedIndexJSON) index() (SeedIndex, *LoadError) {
	switch {
	case ej.Name == nil:
		return SeedIndex{}, pathErr("name", "required")
	case ej.Definition == nil:
		return SeedIndex{}, pathErr("definition", "required")
	case ej.Definition[0] != '{':
		return SeedIndex{}, pathErr("definition", "want a JSON object")
	}
	return SeedIndex{Name: *ej.Name, Definition: ej.Definition}, nil
}

// contentJSON is the one content field of an entry of "files" or "blobs":
// "content" (text), "content_base64" (standard base64) or "json" (any JSON
// value, stored compacted). decodeStrict drops its name from field paths.
type contentJSON struct {
	Content       *string         `json:"content"`
	ContentBase64 *string         `json:"content_base64"`
	JSON          json.RawMessage `json:"json"`
}

// seedFileJSON is one entry of "files".
type seedFileJSON struct {
	Comment string `json:"comment"`
	Name    string `json:"name"`
	contentJSON
}

// seedBlobJSON is one entry of "blobs".
type seedBlobJSON struct {
	Comment     string  `json:"comment"`
	Container   *string `json:"container"`
	Name        *string `json:"name"`
	ContentType string  `json:"content_type"`
	contentJSON
}

func (fj *seedFileJSON) file() (SeedFile, *LoadError) {
	content, _, e := fj.content()
	return SeedFile{Name: fj.Name, Content: content}, e
}

func (bj *seedBlobJSON) blob() (SeedBlob, *LoadError) {
	switch {
	case bj.Container == nil:
		return SeedBlob{}, pathErr("container", "required")
	case bj.Name == nil:
		return SeedBlob{}, pathErr("name", "required")
	}
	content, field, e := bj.content()
	if e != nil {
		return SeedBlob{}, e
	}
	b := SeedBlob{Container: *bj.Container, Name: *bj.Name, Content: content, ContentType: bj.ContentType}
	if b.ContentType == "" && field == "json" {
		b.ContentType = jsonBlobType
	}
	return b, nil
}

// content returns the entry's bytes and the field they came from.
func (cj contentJSON) content() ([]byte, string, *LoadError) {
	var from string
	for _, k := range []field{{"content", cj.Content != nil}, {"content_base64", cj.ContentBase64 != nil}, {"json", cj.JSON != nil}} {
		if !k.present {
			continue
		}
		if from != "" {
			return nil, "", pathErr(k.name, fmt.Sprintf("excludes %s: give one of %s", from, seedContentFields))
		}
		from = k.name
	}
	switch from {
	case "":
		return nil, "", pathErr("", fmt.Sprintf("no content: give one of %s (\"content\": \"\" for an empty one)", seedContentFields))
	case "content":
		return []byte(*cj.Content), from, nil
	case "content_base64":
		b, err := base64.StdEncoding.DecodeString(*cj.ContentBase64)
		if err != nil {
			return nil, "", pathErr("content_base64", "not standard base64 (RFC 4648, with padding)")
		}
		return b, from, nil
	default: // json
		var buf bytes.Buffer
		if err := json.Compact(&buf, cj.JSON); err != nil { // unreachable: the seed is valid JSON
			return nil, "", pathErr("json", "invalid JSON")
		}
		return buf.Bytes(), from, nil
	}
}
