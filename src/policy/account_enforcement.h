#pragma once
// Work that spans resources on the platform clock, for one billing account: subscriptions
// renewed, expired into pay-as-you-go; spend limits (an event at 80 %, a stop at the limit);
// the warning before the projected zero; in arrears, running pay-as-you-go instances stopped,
// then after the graces stopped instances released and detached data disks binned, each
// step warned first (spec "Billing"; the rules and their planning are billing/arrears.h and
// billing/subscriptions.h). It calls the instances' and disks' own actions; BillingService
// reaches it through its `enforce_account` hook, which the server wires up, so billing never
// calls a resource's actions itself.
#include <string>
#include <vector>

#include "billing/arrears.h"
#include "config/config.h"
#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::policy {

// Everything due for the account at `now`: settles its open meters, then subscriptions,
// spend limits, the runs-out warning and arrears. Runs in the caller's write transaction.
Result<billing::ArrearsOutcome> enforce_account(store::Database& db, const config::Config& config,
                                                const std::string& account_id, SysTime now);

// Renews what is due and affordable, turns what expired into stopped pay-as-you-go
// instances (the ids to kick are appended).
Status enforce_subscriptions(store::Database& db, const std::vector<std::string>& users, SysTime now,
                             std::vector<std::string>& kicks);

}  // namespace gpucloud::policy
