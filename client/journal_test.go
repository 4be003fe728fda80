package client

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFileJournal(t *testing.T) {
	t.Parallel()

	t.Run("SurvivesReopen", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "nested", "journal")
		j, err := NewFileJournal(dir)
		require.NoError(t, err)
		desc := "d"
		a := Intent{Key: "key-a", Params: ChargeParams{Amount: 1, Currency: "usd", PaymentMethod: "pm_x", Description: &desc, Metadata: map[string]string{"k": "v"}},
			CreatedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
		b := Intent{Key: `weird/"key"\..`, Params: visa, CreatedAt: time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)}
		require.NoError(t, j.Put(a))
		require.NoError(t, j.Put(b))
		require.NoError(t, j.Put(b), "a second Put of one key replaces it")

		info, err := os.Stat(dir)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), info.Mode().Perm())

		reopened, err := NewFileJournal(dir)
		require.NoError(t, err)
		got, err := reopened.List()
		require.NoError(t, err)
		require.ElementsMatch(t, []Intent{a, b}, got)

		require.NoError(t, reopened.Delete(a.Key))
		require.NoError(t, reopened.Delete(a.Key), "deleting twice is no error")
		got, err = j.List()
		require.NoError(t, err)
		require.Equal(t, []Intent{b}, got)

		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 1)
		info, err = entries[0].Info()
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	})

	t.Run("IgnoresPartialWrites", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		j, err := NewFileJournal(dir)
		require.NoError(t, err)
		require.NoError(t, j.Put(Intent{Key: "k", Params: visa}))
		// What a crash mid-Put leaves: a temp file, half written.
		require.NoError(t, os.WriteFile(filepath.Join(dir, tempPrefix+"123"), []byte(`{"key":"half`), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "README"), []byte("not an intent"), 0o600))
		got, err := j.List()
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, "k", got[0].Key)
	})

	t.Run("CorruptIntentIsAnError", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		j, err := NewFileJournal(dir)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "bad"+intentSuffix), []byte("{"), 0o600))
		_, err = j.List()
		require.ErrorContains(t, err, "bad.json")
	})

	t.Run("MisnamedIntentIsAnError", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		j, err := NewFileJournal(dir)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "copy"+intentSuffix), []byte(`{"key":"k","params":{}}`), 0o600))
		_, err = j.List()
		require.ErrorContains(t, err, "whose file is")
	})

	// AtomicUnderConcurrentWrites: readers listing while writers rewrite
	// the same intents never see a partial file, and no temp file is left.
	t.Run("AtomicUnderConcurrentWrites", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		j, err := NewFileJournal(dir)
		require.NoError(t, err)
		big := map[string]string{}
		for i := range 50 {
			big[fmt.Sprintf("key%02d", i)] = strings.Repeat("v", 500)
		}
		const writers, rounds = 4, 25
		var wg sync.WaitGroup
		done := make(chan struct{})
		errs := make(chan error, 16)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					p := visa
					p.Amount = int64(r + 1)
					p.Metadata = big
					if err := j.Put(Intent{Key: fmt.Sprintf("k%d", w%2), Params: p}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		var readers sync.WaitGroup
		for range 2 {
			readers.Add(1)
			go func() {
				defer readers.Done()
				for {
					select {
					case <-done:
						return
					default:
					}
					got, err := j.List()
					if err != nil {
						errs <- err
						return
					}
					for _, in := range got {
						if len(in.Params.Metadata) != 50 {
							errs <- fmt.Errorf("partial intent %q", in.Key)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(done)
		readers.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 2, "two keys, no temp files left behind")
	})

	t.Run("EmptyDir", func(t *testing.T) {
		t.Parallel()
		_, err := NewFileJournal("")
		require.Error(t, err)
	})
}

func TestMemoryJournalCopies(t *testing.T) {
	t.Parallel()
	var j MemoryJournal
	p := ChargeParams{Amount: 1, Currency: "usd", PaymentMethod: "pm_x", Metadata: map[string]string{"a": "1"}}
	require.NoError(t, j.Put(Intent{Key: "k", Params: p}))
	p.Metadata["a"] = "changed"
	got, err := j.List()
	require.NoError(t, err)
	require.Equal(t, "1", got[0].Params.Metadata["a"], "the journal keeps what was put, not a view of the caller's map")
	require.Error(t, j.Put(Intent{}))
}
