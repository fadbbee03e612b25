module haptic/tests/peers/dataplaneapi

go 1.26.0

// v3.4.2 by its tag's commit 8613429f11a6 (the module's go.mod has no /v3 suffix, so its v3 tags are
// no Go versions). Written by hand: the module proxy refuses this module (403, "This module version
// is not available", for every version and for the version list), so `build.sh --regen dataplaneapi`
// cannot fill go.sum yet.
require github.com/haproxytech/dataplaneapi v1.2.5-0.20260814095652-8613429f11a6

tool github.com/haproxytech/dataplaneapi/cmd/dataplaneapi
