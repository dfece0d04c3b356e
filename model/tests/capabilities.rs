//! Which steps depend on a required capability (decision D40), from the compiled workflow alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{compiled_step, s, workflow};
use workrail_model::capabilities::dependencies;
use workrail_spec::closed::{Capability, CapabilityRequirement};
use workrail_spec::ids::StepId;

#[test]
fn steps_after_a_required_capabilitys_first_probe_depend_on_it() {
    let mut wf = workflow(
        vec![
            compiled_step("before", None),
            compiled_step("capability_probe_web_browsing", None),
            compiled_step("after", None),
            compiled_step("capability_probe_delegation", None),
            compiled_step("last", None),
        ],
        vec![
            s("before"),
            s("capability_probe_web_browsing"),
            s("after"),
            s("capability_probe_delegation"),
            s("last"),
        ],
        vec![],
    );
    wf.body
        .capabilities
        .insert(Capability::WebBrowsing, CapabilityRequirement::Required);
    wf.body
        .capabilities
        .insert(Capability::Delegation, CapabilityRequirement::Preferred);
    let deps = |wf: &workrail_spec::compiled::CompiledWorkflowSnapshotV1, id: &str| {
        dependencies(wf, &StepId::parse(id).unwrap())
    };
    assert!(deps(&wf, "before").is_empty(), "before the first probe");
    assert!(
        deps(&wf, "capability_probe_web_browsing").is_empty(),
        "a probe depends on nothing"
    );
    assert_eq!(deps(&wf, "after"), [Capability::WebBrowsing]);
    assert!(deps(&wf, "capability_probe_delegation").is_empty());
    // A preferred capability is never a dependency.
    assert_eq!(deps(&wf, "last"), [Capability::WebBrowsing]);
    wf.body
        .capabilities
        .insert(Capability::Delegation, CapabilityRequirement::Required);
    assert_eq!(
        deps(&wf, "last"),
        [Capability::Delegation, Capability::WebBrowsing]
    );
}
