package client

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Journal keeps the intents that have no final answer yet, so that a
// process that crashes mid-retry can resume them with their original keys.
// Implementations must be safe for concurrent use, and Put must be durable
// when it returns: the first attempt is sent right after it.
type Journal interface {
	// Put stores in, replacing an intent with the same key.
	Put(in Intent) error
	// Delete forgets the intent with this key; an unknown key is no error.
	Delete(key string) error
	// List returns every stored intent, in no particular order.
	List() ([]Intent, error)
}

// FileJournal is a Journal in a directory, one JSON file per intent. Every
// write is atomic and durable: a temporary file is written and fsynced,
// renamed over the intent's file, and the directory is fsynced, so a crash
// leaves either the old file or the new one, never part of one. Several
// processes may share the directory.
type FileJournal struct {
	dir string
}

// File names in a FileJournal's directory: intents end in intentSuffix;
// files being written start with tempPrefix and are never listed (a crash
// mid-write may leave one behind, harmless but not cleaned up).
const (
	intentSuffix = ".json"
	tempPrefix   = ".tmp-"
)

// NewFileJournal opens the journal in dir, creating the directory (mode
// 0700: intents hold payment details) if needed.
func NewFileJournal(dir string) (*FileJournal, error) {
	if dir == "" {
		return nil, errors.New("file journal: empty directory name")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("file journal: %w", err)
	}
	return &FileJournal{dir: dir}, nil
}

// Dir returns the journal's directory.
func (j *FileJournal) Dir() string { return j.dir }

// path names the intent's file by a hash of its key: keys may hold any
// visible ASCII, '/' included, which a file name may not.
func (j *FileJournal) path(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(j.dir, hex.EncodeToString(sum[:16])+intentSuffix)
}

// Put writes in atomically (see FileJournal).
func (j *FileJournal) Put(in Intent) error {
	if in.Key == "" {
		return errors.New("journal put: intent has no key")
	}
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("journal put %s: %w", in.Key, err)
	}
	if err := j.writeAtomic(j.path(in.Key), append(b, '\n')); err != nil {
		return fmt.Errorf("journal put %s: %w", in.Key, err)
	}
	return nil
}

func (j *FileJournal) writeAtomic(path string, b []byte) (err error) {
	f, err := os.CreateTemp(j.dir, tempPrefix+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		return err
	}
	// Without this fsync the rename could reach the disk before the data,
	// and a power loss would leave an empty intent under its real name.
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return j.syncDir()
}

// syncDir makes a rename or a removal durable: both change the directory,
// not the file.
func (j *FileJournal) syncDir() error {
	d, err := os.Open(j.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Delete removes the intent's file.
func (j *FileJournal) Delete(key string) error {
	if err := os.Remove(j.path(key)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("journal delete %s: %w", key, err)
	}
	if err := j.syncDir(); err != nil {
		return fmt.Errorf("journal delete %s: %w", key, err)
	}
	return nil
}

// List reads every intent file. An unreadable one is an error rather than
// skipped: a skipped intent would never be resumed, silently.
func (j *FileJournal) List() ([]Intent, error) {
	entries, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, fmt.Errorf("journal list: %w", err)
	}
	var out []Intent
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, tempPrefix) || !strings.HasSuffix(name, intentSuffix) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(j.dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // settled and deleted since ReadDir
		}
		if err != nil {
			return nil, fmt.Errorf("journal list: %w", err)
		}
		var in Intent
		if err := json.Unmarshal(b, &in); err != nil {
			return nil, fmt.Errorf("journal list: %s: %w", name, err)
		}
		if in.Key == "" {
			return nil, fmt.Errorf("journal list: %s: intent has no key", name)
		}
		// Delete finds an intent by its key's file name only; a file under
		// another name (copied in by hand) could never be deleted and
		// would be resumed forever.
		if want := filepath.Base(j.path(in.Key)); name != want {
			return nil, fmt.Errorf("journal list: %s: holds key %q, whose file is %s", name, in.Key, want)
		}
		out = append(out, in)
	}
	return out, nil
}

// MemoryJournal is a Journal in memory, for tests and for programs that
// accept losing intents on a crash. The zero value is ready to use.
type MemoryJournal struct {
	mu      sync.Mutex
	intents map[string]Intent
}

// NewMemoryJournal returns an empty MemoryJournal.
func NewMemoryJournal() *MemoryJournal { return &MemoryJournal{} }

// Put stores a copy of in.
func (j *MemoryJournal) Put(in Intent) error {
	if in.Key == "" {
		return errors.New("journal put: intent has no key")
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.intents == nil {
		j.intents = make(map[string]Intent)
	}
	j.intents[in.Key] = in.clone()
	return nil
}

// Delete forgets the intent with this key.
func (j *MemoryJournal) Delete(key string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.intents, key)
	return nil
}

// List returns copies of the stored intents.
func (j *MemoryJournal) List() ([]Intent, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]Intent, 0, len(j.intents))
	for _, in := range j.intents {
		out = append(out, in.clone())
	}
	return out, nil
}

// Has reports whether an intent with this key is stored.
func (j *MemoryJournal) Has(key string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.intents[key]
	return ok
}
