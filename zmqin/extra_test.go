package zmqin

import (
	"strconv"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

// mmDigest is a vLLM mm identifier: 64 hex digits, of which the first 16
// are the mm hash.
func mmDigest(h uint64) string {
	return strings.Repeat("0", 16-len(strconv.FormatUint(h, 16))) + strconv.FormatUint(h, 16) + strings.Repeat("ab", 24)
}

// storedWithExtras encodes one batch with a BlockStored of tokens 1..8
// (block size 4, hashes 11 and 12) whose extra_keys are given, in the
// array (positional) or map form.
func storedWithExtras(mapForm bool, lora string, extra []byte, salt string) []byte {
	p := []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91}
	toks := []byte{0x98, 1, 2, 3, 4, 5, 6, 7, 8}
	if mapForm {
		n := 6
		if salt != "" {
			n++
		}
		p = append(p, 0x80|byte(n))
		p = msgpack.AppendStr(p, "type")
		p = msgpack.AppendStr(p, "BlockStored")
		p = msgpack.AppendStr(p, "block_hashes")
		p = append(p, 0x92, 11, 12)
		p = msgpack.AppendStr(p, "token_ids")
		p = append(p, toks...)
		p = msgpack.AppendStr(p, "block_size")
		p = append(p, 4)
		p = msgpack.AppendStr(p, "lora_name")
		p = msgpack.AppendOptStr(p, lora)
		p = msgpack.AppendStr(p, "extra_keys")
		p = append(p, extra...)
		if salt != "" {
			p = msgpack.AppendStr(p, "cache_salt")
			p = msgpack.AppendStr(p, salt)
		}
	} else {
		// [tag, block_hashes, parent, token_ids, block_size, lora_id,
		//  medium, lora_name, extra_keys]
		p = append(p, 0x99)
		p = msgpack.AppendStr(p, "BlockStored")
		p = append(p, 0x92, 11, 12, 0xc0)
		p = append(p, toks...)
		p = append(p, 4, 0xc0, 0xc0)
		p = msgpack.AppendOptStr(p, lora)
		p = append(p, extra...)
	}
	return append(p, 0xc0)
}

// TestExtraKeysHashLikeRequests: a BlockStored whose extra_keys carry vLLM
// mm identifiers (a plain string, or the [hash, offset] pair of vLLM
// 0.19+), a tagged cache salt and other items indexes blocks whose local
// hashes are those of a request with the same tokens, block_mm_infos and
// cache_salt: a selection over the decoded events matches them.
func TestExtraKeysHashLikeRequests(t *testing.T) {
	const mmA, mmB = 0x1234_5678_9abc_def0, 0x0fed_cba9_8765_4321
	var extra []byte
	extra = msgpack.AppendArrayHeader(extra, 2)
	// Block 0: the LoRA name (skipped), the salt tag, an mm digest.
	extra = msgpack.AppendArrayHeader(extra, 3)
	extra = msgpack.AppendStr(extra, "adapter-x")
	extra = msgpack.AppendStr(extra, "dynamo-cache-salt:tenant-a")
	extra = msgpack.AppendStr(extra, mmDigest(mmA))
	// Block 1: an [mm digest, offset] pair and prompt-embedding bytes.
	extra = msgpack.AppendArrayHeader(extra, 2)
	extra = msgpack.AppendArrayHeader(extra, 2)
	extra = msgpack.AppendStr(extra, strings.ToUpper(mmDigest(mmB)))
	extra = msgpack.AppendUint(extra, 3)
	extra = append(extra, 0xc4, 2, 'e', 'm')

	req := core.Prompt{TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, HasTokenIDs: true, LoraName: "adapter-x", CacheSalt: "tenant-a",
		BlockMMHashes: [][]uint64{{mmA}, {mmB}}}
	for _, tc := range []struct {
		name    string
		payload []byte
		prompt  core.Prompt
		blocks  int64
	}{
		{"array form", storedWithExtras(false, "adapter-x", extra, ""), req, 2},
		{"map form", storedWithExtras(true, "adapter-x", extra, ""), req, 2},
		{"map form, cache_salt field wins", storedWithExtras(true, "adapter-x", extra, "tenant-b"), func() core.Prompt { p := req; p.CacheSalt = "tenant-b"; return p }(), 2},
		{"request without mm infos", storedWithExtras(false, "adapter-x", extra, ""), func() core.Prompt { p := req; p.BlockMMHashes = nil; return p }(), 0},
		{"request mm on block 0 only", storedWithExtras(false, "adapter-x", extra, ""), func() core.Prompt { p := req; p.BlockMMHashes = [][]uint64{{mmA}}; return p }(), 1},
		{"no extra_keys", storedWithExtras(false, "adapter-x", []byte{0xc0}, ""), func() core.Prompt { p := req; p.BlockMMHashes, p.CacheSalt = nil, ""; return p }(), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(4)
			b, err := d.Decode(tc.payload, radix.WorkerKey{WorkerID: 1})
			if err != nil || len(b.Events) != 1 {
				t.Fatalf("decode: %v, %d events", err, len(b.Events))
			}
			svc, _ := core.New(core.DefaultConfig(), core.Options{})
			ep, kv, bs := "http://w", "tcp://127.0.0.1:1", uint32(4)
			if _, err := svc.UpsertWorker(&core.WorkerSpec{WorkerID: 1, WorkerFields: core.WorkerFields{Endpoint: &ep, KVEventsEndpoint: &kv, BlockSize: &bs}}); err != nil {
				t.Fatal(err)
			}
			svc.EventSink(core.DefaultPartition, core.DefaultPartition).ApplyBatch(b.Events)
			ov, err := svc.OverlapScores(&core.QueryRequest{Prompt: tc.prompt})
			if err != nil {
				t.Fatal(err)
			}
			if got := ov.Workers[0].DeviceBlocks; got != tc.blocks {
				t.Fatalf("request matched %d blocks of the event, want %d", got, tc.blocks)
			}
		})
	}
}

func TestParseMMHash(t *testing.T) {
	if h, ok := parseMMHash([]byte(mmDigest(0xabc))); !ok || h != 0xabc {
		t.Fatalf("%x %v", h, ok)
	}
	for _, s := range []string{"", "abc", strings.Repeat("g", 64), strings.Repeat("a", 63), strings.Repeat("a", 65)} {
		if _, ok := parseMMHash([]byte(s)); ok {
			t.Errorf("%q parsed", s)
		}
	}
}
