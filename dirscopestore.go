package readrecovery

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/readrecovery/readrecovery/internal/flock"
	"github.com/readrecovery/readrecovery/scopecard"
)

// DirScopeStore returns a [ScopeStore] kept in the directory dir, for the
// processes of one host, or of hosts that share a file system. dir is
// created (mode 0700, with its parents) when it is missing; an error
// wrapping [ErrScopeStore] is returned when it cannot be made, is not a
// directory, or a file cannot be created in it.
//
// Each scope is a subdirectory named by the digest of its text (the first
// 32 hex digits of its SHA-256; nothing under dir carries the scope's
// text) holding card.json, a lock file, and one m-DIGEST.json per member
// (DIGEST: of the member's ID). Records are JSON with a version, refused
// when longer than 1 KiB or with an unknown field. A card is replaced
// under an exclusive flock(2) on the scope's lock file (read, merge,
// write a temporary file, fsync it, rename it over card.json, fsync the
// directory); an exchange whose card changes nothing takes no lock and
// writes no card. Waiting for the lock is bounded by the exchange's ctx.
// A member's record is written by that member alone (a temporary file
// renamed over its own, not fsynced: losing it to a crash loses no more
// than its lease would); a record whose lease ended is not returned, and
// one whose lease ended more than ten of its lease periods ago is removed.
// A member record that fails to decode is skipped; a card that fails to
// decode fails the exchange and stays as it is.
//
// Off unix, and on a file system that keeps no locks (flock fails with
// ENOLCK or EOPNOTSUPP), there is no lock: a card is still replaced
// read-merge-rename, each rename atomic, but two processes that merge in
// the same moment race, and the later rename may drop what the other
// wrote in the window between its read and its rename (a few
// milliseconds). Use one host's local file system where that matters.
//
// Its clock is the local one ([ScopeView.Now] is time.Now): the
// processes of one host share it; across hosts on a shared file system
// their skew adds to the clock skew a not-before must allow for (R109).
func DirScopeStore(dir string) (ScopeStore, error) {
	if dir == "" {
		return nil, storeError("directory store", errors.New("no directory named"))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, storeError("directory store", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, storeError("directory store", err)
	}
	if !fi.IsDir() {
		return nil, storeError("directory store", fmt.Errorf("%s is not a directory", dir))
	}
	f, err := os.CreateTemp(dir, ".tmp-probe-")
	if err != nil {
		return nil, storeError("directory store: not writable", err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return nil, storeError("directory store", err)
	}
	return &dirStore{dir: dir}, nil
}

// dirStore is [DirScopeStore]'s store.
type dirStore struct{ dir string }

// Names of a scope's files in its subdirectory.
const (
	dirCardName   = "card.json"
	dirLockName   = "lock"
	dirTempPrefix = ".tmp-"
	// dirTempAge is how old a temporary file left by a crash must be
	// before an exchange removes it.
	dirTempAge = time.Hour
)

func (s *dirStore) Exchange(ctx context.Context, scope string, card ScopeCard, member ScopeMember) (ScopeView, error) {
	if ctx == nil {
		return ScopeView{}, storeError("exchange", errNilContext)
	}
	if err := ctx.Err(); err != nil {
		return ScopeView{}, storeError("exchange", err)
	}
	in, m, err := checkExchange(scope, card, member)
	if err != nil {
		return ScopeView{}, err
	}
	name := scopecard.Name(scope)
	sd := filepath.Join(s.dir, name)
	if err := os.Mkdir(sd, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return ScopeView{}, storeError("scope "+name, err)
	}

	// A card only grows: one that changes nothing now changes nothing
	// later, so the lock is taken only when the merge would write.
	stored, err := readDirCard(sd, name)
	if err != nil {
		return ScopeView{}, err
	}
	if merged := mergeCard(stored, in); merged != stored {
		if stored, err = s.mergeLocked(ctx, sd, name, in); err != nil {
			return ScopeView{}, err
		}
	}

	now := scopecard.Normal(time.Now())
	if m.ID != "" {
		if err := writeDirMember(sd, m, now); err != nil {
			return ScopeView{}, storeError("member record of scope "+name, err)
		}
	}
	members, err := readDirMembers(ctx, sd, now)
	if err != nil {
		return ScopeView{}, storeError("members of scope "+name, err)
	}
	return ScopeView{Card: stored, Members: withOwn(members, m, now), Now: now}, nil
}

// mergeLocked merges in into the card of sd under the scope's lock and
// returns the merged card.
func (s *dirStore) mergeLocked(ctx context.Context, sd, name string, in ScopeCard) (ScopeCard, error) {
	lf, err := os.OpenFile(filepath.Join(sd, dirLockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return ScopeCard{}, storeError("lock of scope "+name, err)
	}
	defer lf.Close() // releases the lock
	if err := lockWait(ctx, lf); err != nil && !errors.Is(err, flock.ErrNoLocks) {
		return ScopeCard{}, storeError("lock of scope "+name, err)
	}
	stored, err := readDirCard(sd, name)
	if err != nil {
		return ScopeCard{}, err
	}
	merged := mergeCard(stored, in)
	if merged == stored {
		return stored, nil
	}
	if err := writeDirFile(sd, dirCardName, scopecard.EncodeCard(scopecard.Card(merged)), true); err != nil {
		return ScopeCard{}, storeError("card of scope "+name, err)
	}
	return merged, nil
}

// lockWait takes the exclusive lock on lf, retrying every few
// milliseconds while another holds it, until ctx is done.
func lockWait(ctx context.Context, lf *os.File) error {
	pause := time.Millisecond
	for {
		err := flock.Lock(lf, true)
		if !errors.Is(err, flock.ErrLocked) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 16*time.Millisecond)
	}
}

// readDirCard reads the card of sd: the zero card when there is none.
func readDirCard(sd, name string) (ScopeCard, error) {
	b, err := readDirRecord(sd, dirCardName, name+"/"+dirCardName, scopecard.MaxCardBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return ScopeCard{}, nil
	}
	if err != nil {
		return ScopeCard{}, storeError("card of scope "+name, err)
	}
	c, err := scopecard.DecodeCard(name+"/"+dirCardName, b)
	if err != nil {
		return ScopeCard{}, storeError("card of scope "+name, err)
	}
	return ScopeCard(c), nil
}

// readDirRecord reads the regular file sd/file. What is not a regular
// file, or is longer than limit, is a *scopecard.CorruptError naming
// name, found before anything is read; a symbolic link is refused by the
// open (unix).
func readDirRecord(sd, file, name string, limit int) ([]byte, error) {
	f, err := os.OpenFile(filepath.Join(sd, file), flock.ReadFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &scopecard.CorruptError{Name: name, Reason: "not a regular file"}
	}
	if fi.Size() > int64(limit) {
		return nil, &scopecard.CorruptError{Name: name, Reason: fmt.Sprintf("%d bytes, more than %d", fi.Size(), limit)}
	}
	b, err := scopecard.ReadCapped(f, limit)
	if err != nil {
		return nil, &scopecard.CorruptError{Name: name, Reason: err.Error()}
	}
	return b, nil
}

// writeDirFile replaces sd/name with b: a temporary file in sd, written
// (and fsynced when durable), renamed over name, and then (when durable)
// the directory fsynced.
func writeDirFile(sd, name string, b []byte, durable bool) error {
	f, err := os.CreateTemp(sd, dirTempPrefix)
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(sd, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if durable {
		return syncDir(sd)
	}
	return nil
}

// syncDir fsyncs the directory sd, so that a rename in it is durable.
// Windows cannot flush a directory handle (and makes a rename durable
// with the file system's own journal): there it does nothing.
func syncDir(sd string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(sd)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// memberFile is the name of the record of the member with ID id.
func memberFile(id string) string { return "m-" + scopecard.Name(id) + ".json" }

func writeDirMember(sd string, m ScopeMember, now time.Time) error {
	return writeDirFile(sd, memberFile(m.ID), scopecard.EncodeMember(scopecard.Member(m), now), false)
}

// readDirMembers returns the members of sd whose lease lies after now;
// it removes records whose lease ended more than ten lease periods ago
// and temporary files older than dirTempAge.
func readDirMembers(ctx context.Context, sd string, now time.Time) ([]ScopeMember, error) {
	des, err := os.ReadDir(sd)
	if err != nil {
		return nil, err
	}
	var live []ScopeMember
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := de.Name()
		if strings.HasPrefix(n, dirTempPrefix) {
			if fi, err := de.Info(); err == nil && now.Sub(fi.ModTime()) > dirTempAge {
				os.Remove(filepath.Join(sd, n))
			}
			continue
		}
		if !strings.HasPrefix(n, "m-") || !strings.HasSuffix(n, ".json") {
			continue
		}
		b, err := readDirRecord(sd, n, n, scopecard.MaxMemberBytes)
		if err != nil {
			continue // gone since the listing, or not a record: skipped
		}
		m, written, err := scopecard.DecodeMember(n, b)
		if err != nil || memberFile(m.ID) != n {
			continue // a corrupt record, or one under another's name: skipped
		}
		switch {
		case m.Lease.After(now):
			live = append(live, ScopeMember(m))
		case scopecard.Stale(m, written, now):
			os.Remove(filepath.Join(sd, n))
		}
	}
	return live, nil
}

// withOwn returns members with own's record in place of any read for its
// ID (own is what the caller just wrote; another process's cleanup or a
// slow file system must not hide it), when own is live at now, sorted by
// ID.
func withOwn(members []ScopeMember, own ScopeMember, now time.Time) []ScopeMember {
	if own.ID != "" {
		members = slices.DeleteFunc(members, func(m ScopeMember) bool { return m.ID == own.ID })
		if own.Lease.After(now) {
			members = append(members, own)
		}
	}
	slices.SortFunc(members, func(a, b ScopeMember) int { return strings.Compare(a.ID, b.ID) })
	return members
}

// checkExchange checks an exchange's arguments and returns the card and
// member as a store keeps them (UTC, to the millisecond).
func checkExchange(scope string, card ScopeCard, member ScopeMember) (ScopeCard, ScopeMember, error) {
	if scope == "" {
		return ScopeCard{}, ScopeMember{}, storeError("exchange", fmt.Errorf("%w: empty scope", scopecard.ErrInvalid))
	}
	c, err := scopecard.CheckCard(scopecard.Card(card))
	if err != nil {
		return ScopeCard{}, ScopeMember{}, storeError("exchange: card", err)
	}
	m, err := scopecard.CheckMember(scopecard.Member(member))
	if err != nil {
		return ScopeCard{}, ScopeMember{}, storeError("exchange: member", err)
	}
	return ScopeCard(c), ScopeMember(m), nil
}

// errNilContext refuses an exchange without a context.
var errNilContext = errors.New("nil context")

// storeError wraps err as a failure of a store: ErrScopeStore, what was
// being done, and err (which names digests only).
func storeError(what string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrScopeStore, what, err)
}
