package responses

import (
	"context"
	"time"
)

// Owners records which tenant created each response a provider stores
// for the gateway (a Responses API request passed through to a provider
// that serves the API natively): the provider keeps every tenant's
// responses under the gateway's one account, and only the tenant that
// created one may continue it (previous_response_id) or reach it by its
// path. A record is a key scoped by tenant, as a Store's are, with the
// stored responses' TTL, in Redis whenever the gateway has it (shared by
// replicas, whatever the stored responses' store), else in memory. A
// response created before the gateway kept records has none: it is
// another tenant's as far as the gateway can tell. Safe for concurrent
// use.
type Owners struct {
	KV  KV
	TTL time.Duration // how long a record is kept; <= 0 forever
}

// maxProviderID bounds a provider's response id the gateway records or
// looks up; a longer one is never recorded.
const maxProviderID = 128

// owned is every record's value: the key alone says who owns what.
var owned = []byte{'1'}

func ownerKey(tenant, id string) string { return "own:" + tenant + "\x00" + id }

// Record notes that tenant created the provider's response id.
func (o *Owners) Record(ctx context.Context, tenant, id string) error {
	if id == "" || len(id) > maxProviderID {
		return nil
	}
	return o.KV.Set(ctx, ownerKey(tenant, id), owned, o.TTL)
}

// Owns reports whether tenant created the provider's response id: false
// for an id never recorded (another tenant's, one made before records
// were kept, or expired).
func (o *Owners) Owns(ctx context.Context, tenant, id string) (bool, error) {
	if id == "" || len(id) > maxProviderID {
		return false, nil
	}
	k := ownerKey(tenant, id)
	var ok bool
	var err error
	if b, bounded := o.KV.(boundedKV); bounded {
		_, ok, err = b.GetMax(ctx, k, len(owned))
	} else {
		_, ok, err = o.KV.Get(ctx, k)
	}
	return ok, err
}

// Items: the output items of a tenant's responses (messages, reasoning,
// tool calls), which a later request may name by id (an item_reference,
// or a reasoning item without its encrypted_content) and the provider
// reads from every tenant's alike. A record is a key of its own kind,
// "item:", so that an item's id never passes as a response's.

// MaxItems bounds the item ids one answer records and one request looks
// up.
const MaxItems = 1024

func itemKey(tenant, id string) string { return "item:" + tenant + "\x00" + id }

// manyKV is a KV that writes or looks up many keys in one round trip
// (caching.RedisStore).
type manyKV interface {
	SetMany(ctx context.Context, keys []string, val []byte, ttl time.Duration) error
	ExistMany(ctx context.Context, keys []string) ([]bool, error)
}

// RecordItems notes that tenant's response carried the output items ids
// (at most MaxItems; an id empty or over maxProviderID is skipped).
func (o *Owners) RecordItems(ctx context.Context, tenant string, ids []string) error {
	keys := make([]string, 0, min(len(ids), MaxItems))
	for _, id := range ids[:min(len(ids), MaxItems)] {
		if id != "" && len(id) <= maxProviderID {
			keys = append(keys, itemKey(tenant, id))
		}
	}
	if m, ok := o.KV.(manyKV); ok && len(keys) > 1 {
		return m.SetMany(ctx, keys, owned, o.TTL)
	}
	for _, k := range keys {
		if err := o.KV.Set(ctx, k, owned, o.TTL); err != nil {
			return err
		}
	}
	return nil
}

// OwnsItems returns the first of ids (at most MaxItems) that no response
// of tenant's carried, or ok when tenant's responses carried them all.
func (o *Owners) OwnsItems(ctx context.Context, tenant string, ids []string) (missing string, ok bool, err error) {
	if len(ids) > MaxItems {
		return "", false, nil
	}
	for _, id := range ids {
		if id == "" || len(id) > maxProviderID {
			return id, false, nil
		}
	}
	if m, many := o.KV.(manyKV); many && len(ids) > 1 {
		keys := make([]string, len(ids))
		for i, id := range ids {
			keys[i] = itemKey(tenant, id)
		}
		there, err := m.ExistMany(ctx, keys)
		if err != nil {
			return "", false, err
		}
		for i, id := range ids {
			if i >= len(there) || !there[i] {
				return id, false, nil
			}
		}
		return "", true, nil
	}
	for _, id := range ids {
		k := itemKey(tenant, id)
		var found bool
		if b, bounded := o.KV.(boundedKV); bounded {
			_, found, err = b.GetMax(ctx, k, len(owned))
		} else {
			_, found, err = o.KV.Get(ctx, k)
		}
		if err != nil || !found {
			return id, false, err
		}
	}
	return "", true, nil
}
