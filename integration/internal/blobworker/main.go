// Command blobworker is one worker of a File batch whose journal run is in
// Azure Blob Storage (docs/policy.md: shared-runs), for the integration tests: it opens the
// shared run with blobjournal, uploads the files its continuation plan
// allows through readrecovery and the test's proxy, one sequence per file,
// and prints one JSON line per file and a last line with why it ended.
//
// Exit codes: 0 every eligible file was tried; 3 the run is waiting
// (a restriction longer than -short); 4 unresolved; 5 a persistence
// failure; 1 anything else.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/journal"
)

const (
	account = "devstoreaccount1"
	// The emulator's public, documented development key.
	key = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

type line struct {
	Worker  int    `json:"worker"`
	File    string `json:"file,omitempty"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	At      int64  `json:"at_unix_ms"`
}

func main() {
	var (
		store   = flag.String("store", "", "Blob service URL the journal store talks to (straight to Azurite)")
		proxy   = flag.String("proxy", "", "Blob service URL of the uploads (the test's proxy)")
		cont    = flag.String("container", "", "container")
		prefix  = flag.String("prefix", "journal/", "journal prefix")
		files   = flag.Int("files", 200, "planned files f-000 …")
		id      = flag.Int("worker", 0, "worker number")
		seed    = flag.Uint64("seed", 1, "order seed")
		wait    = flag.Duration("pending-wait", 10*time.Second, "journal.WithPendingWait")
		short   = flag.Duration("short", 5*time.Second, "a waiting status this short is waited out")
		approve = flag.Bool("approve", true, "a new approval: never-attempted files are eligible")
		data    = flag.String("data", "data/", "prefix of the uploaded blobs")
	)
	flag.Parse()
	out := json.NewEncoder(os.Stdout)
	say := func(file, outcome, detail string) {
		_ = out.Encode(line{Worker: *id, File: file, Outcome: outcome, Detail: detail, At: time.Now().UnixMilli()})
	}
	ctx := context.Background()
	cred, err := azblob.NewSharedKeyCredential(account, key)
	if err != nil {
		fail(say, 1, err)
	}
	sc, err := container.NewClientWithSharedKeyCredential(*store+"/"+account+"/"+*cont, cred, blobjournal.ClientOptions())
	if err != nil {
		fail(say, 1, err)
	}
	plan := make([]journal.PlannedFile, *files)
	for i := range plan {
		plan[i] = journal.PlannedFile{ID: fmt.Sprintf("f-%03d", i)}
	}
	j, err := journal.OpenStore(ctx, blobjournal.New(sc, *prefix), journal.WithPlan(plan), journal.WithPendingWait(*wait))
	if err != nil {
		fail(say, 1, err)
	}
	var o policy.ClientOptions
	rrazure.Apply(&o, readrecovery.New(nil))
	up, err := azblob.NewClientWithSharedKeyCredential(*proxy+"/"+account+"/", cred, &azblob.ClientOptions{ClientOptions: o})
	if err != nil {
		fail(say, 1, err)
	}
	approval := journal.NoNewApproval
	if *approve {
		approval = journal.NewApproval
	}
	c, err := j.PlanContinuation(plan, approval, time.Now())
	if err != nil {
		fail(say, 1, err)
	}
	todo := c.Uploads()
	say("", "plan", fmt.Sprintf("%d eligible of %d (%s)", len(todo), len(plan), c.Status.State))
	r := rand.New(rand.NewPCG(*seed, uint64(*id)))
	r.Shuffle(len(todo), func(a, b int) { todo[a], todo[b] = todo[b], todo[a] })
	for _, f := range todo {
		for {
			b := readrecovery.NewBudget(fmt.Sprintf("w%d-%s", *id, f))
			fctx := journal.WithUpload(readrecovery.WithJournal(readrecovery.WithBudget(ctx, b), j), f)
			_, err := up.UploadBuffer(fctx, *cont, *data+f, []byte("content of "+f), nil)
			if err == nil {
				say(f, "acked", "")
				break
			}
			var se *readrecovery.StopError
			var re *azcore.ResponseError
			switch {
			case errors.As(err, &se) && se.Reason == readrecovery.StopReplayRefused:
				say(f, "replay-refused", "")
			case errors.As(err, &se) && se.Reason == readrecovery.StopJournalRestricted:
				st := j.Status(time.Now())
				if st.State == journal.Waiting && time.Duration(st.RemainingSeconds)*time.Second <= *short {
					say(f, "waiting-out", fmt.Sprintf("%d s", st.RemainingSeconds))
					time.Sleep(time.Until(time.Unix(st.NotBeforeUTC, 0)))
					continue
				}
				code := 4
				if st.State == journal.Waiting {
					code = 3
				}
				say(f, "stopped", fmt.Sprintf("%s not_before_utc=%d", st.State, st.NotBeforeUTC))
				os.Exit(code)
			case errors.As(err, &se) && (se.Reason == readrecovery.StopPersistenceFailed || se.Reason == readrecovery.StopReceiptFailed):
				say(f, "stopped", string(se.Reason)+": "+se.Detail)
				os.Exit(5)
			case errors.As(err, &se):
				say(f, "stop", string(se.Reason))
			case errors.As(err, &re):
				say(f, fmt.Sprintf("status-%d", re.StatusCode), "")
			default:
				say(f, "error", err.Error())
			}
			break
		}
	}
	say("", "done", "")
}

func fail(say func(string, string, string), code int, err error) {
	say("", "error", err.Error())
	os.Exit(code)
}
