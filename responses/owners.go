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
