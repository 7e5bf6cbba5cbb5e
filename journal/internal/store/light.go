package store

import (
	"sync"

	"github.com/readrecovery/readrecovery/journal/internal/record"
)

// lightView makes a shard's scan the check across shards (docs/policy.md:
// "Shards in detail"): no receipt, part receipt or head, so no sequence; the
// marker read again only when its version (Blob: the probe's ETag) changed.
type LightView struct {
	Mu     *sync.Mutex  // guards last: the root's
	Last   *LightMarker // the marker bytes this shard's light scan read last
	probed string       // the marker's version the liveness probe returned
}

// lightMarker is a marker's bytes and version, as read last (lightView) or written (loc.own).
type LightMarker struct {
	Data    []byte
	Version string
}

// filter leaves out receipts, part receipts, heads, writes in progress.
func (v *LightView) filter(names []ListedName) []ListedName {
	out := names[:0:0]
	for _, n := range names {
		k, _ := record.KindOf(n.Name)
		_, temp := record.ParseTempName(n.Name)
		_, head := record.ParseHeadName(n.Name)
		if !temp && !head && (k == nil || k.Attempted == nil) {
			out = append(out, n)
		}
	}
	return out
}

// read reads l's marker unless its probed version is the one read last.
func (v *LightView) read(l *Loc, f *Findings, limit int64) ([]byte, string, bool) {
	v.Mu.Lock()
	m := *v.Last
	v.Mu.Unlock()
	if m.Data != nil && v.probed != "" && m.Version == v.probed {
		return m.Data, m.Version, true
	}
	plain := *l
	plain.Light = nil
	data, version, ok := plain.Read(f, record.MarkerName, limit)
	if ok {
		v.Mu.Lock()
		*v.Last = LightMarker{Data: data, Version: version}
		v.Mu.Unlock()
	}
	return data, version, ok
}
