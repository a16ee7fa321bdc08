"""A namespace enforcing Pod Security refuses the job's pods (issue 42 item 19): Volcano's
FailedCreate event repeats the API server's refusal (as the error's text, or dumped as a Go
struct with escaped quotes); the step says it in one line, with what to do."""

from __future__ import annotations

from typing import Any

from volcano_pipelines.volcano.spec import CodeSource, JobOptions, TFJobSpec
from volcano_pipelines.volcano.refusals import ended_before_start
from volcano_pipelines.volcano.tf import build_tf_job

GO_DUMP = (r'Error creating pods: [&errors.StatusError{ErrStatus:v1.Status{TypeMeta:v1.TypeMeta{Kind:"", APIVersion:""}, '
           r'ListMeta:v1.ListMeta{SelfLink:"", ResourceVersion:"", Continue:"", RemainingItemCount:(*int64)(nil)}, '
           r'Status:"Failure", Message:"pods \"j-ps-0\" is forbidden: violates PodSecurity \"restricted:latest\": '
           r'allowPrivilegeEscalation != false (container \"tensorflow\" must set '
           r'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"tensorflow\" must '
           r'set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"tensorflow\" '
           r'must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"tensorflow\" must set '
           r'securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")", Reason:"Forbidden", '
           r'Details:(*v1.StatusDetails)(0xc000a1b2c0), Code:403}}]')
ERROR_TEXT = ('Error creating pods: [pods "j-ps-0" is forbidden: violates PodSecurity "restricted:latest": '
              'runAsNonRoot != true (pod or container "tensorflow" must set securityContext.runAsNonRoot=true)]')


def failed_job(**options: Any) -> dict[str, Any]:
    job = build_tf_job(TFJobSpec(job=JobOptions(name="j", namespace="team", **options), code=CodeSource(url="http://x/")))
    return {**job, "status": {"state": {"phase": "Failed"}}}


def events(message: str) -> list[dict[str, Any]]:
    # The FailedCreate first; Volcano's later FailedSync is the newest warning.
    return [{"type": "Warning", "reason": "FailedCreate", "message": message, "lastTimestamp": "2026-01-01T00:00:01Z"},
            {"type": "Warning", "reason": "FailedSync", "message": "SyncJob j retry limit reached",
             "lastTimestamp": "2026-01-01T00:00:21Z"}]


def test_the_go_dump_becomes_one_line_naming_the_flag_the_pipeline_inputs_and_the_image() -> None:
    text = ended_before_start(failed_job(), events(GO_DUMP), None)
    assert text == ('no pod ever ran: namespace team enforces Pod Security "restricted" and refused the job\'s pods '
                    "(allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, "
                    "seccompProfile): rerun with --pod-security restricted (pipelines: the input pod_security, "
                    "Argo's pod-security, set to restricted), with an image that runs as a numeric non-root user")
    assert "\n" not in text and "StatusError" not in text


def test_the_error_text_form_too() -> None:
    text = ended_before_start(failed_job(), events(ERROR_TEXT), "queue default is fine")
    assert text.startswith('no pod ever ran: namespace team enforces Pod Security "restricted" and refused the job\'s '
                           "pods (runAsNonRoot != true): rerun with --pod-security restricted")


def test_pods_built_for_restricted_and_still_refused_say_what_failed_without_the_advice() -> None:
    text = ended_before_start(failed_job(pod_security="restricted"), events(ERROR_TEXT), None)
    assert "although they were built for the restricted level: runAsNonRoot != true (pod or container" in text
    assert "rerun with" not in text


def test_other_events_are_said_as_before() -> None:
    text = ended_before_start(failed_job(), events("Error creating pods: quota exceeded"), None)
    assert text == "no pod ever ran: Volcano: FailedSync: SyncJob j retry limit reached"
