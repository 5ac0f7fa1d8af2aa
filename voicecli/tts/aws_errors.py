"""What to tell the user about a failed SageMaker call, from either AWS client."""

from __future__ import annotations

from voicecli.errors import VoiceCliError

THROTTLING = ("ThrottlingException", "Throttling", "TooManyRequestsException")
ACCESS = (
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "ExpiredTokenException",
    "MissingAuthenticationTokenException",
)


def explain_code(code: str, message: str, where: str) -> VoiceCliError:
    """A VoiceCliError for an AWS error code and message about ``where`` (the endpoint)."""
    if code in ("ValidationError", "InputValidationError"):
        # Also how a missing endpoint is reported ("Endpoint X of account Y not found.").
        missing = "not found" in message.lower()
        return VoiceCliError(
            f"The {where} {'does not exist' if missing else 'refused the request'} "
            f"({code}: {message}). Check --sagemaker-endpoint and --region; "
            "`aws sagemaker list-endpoints` lists yours."
        )
    if code in THROTTLING:
        return VoiceCliError(
            f"The {where} is throttling requests ({message}). Retry later, or raise the "
            "endpoint's instance count."
        )
    if code == "ModelStreamError":
        return VoiceCliError(
            f"The model behind the {where} failed mid-stream ({message}). Check the "
            "endpoint's CloudWatch logs; retry the request."
        )
    if code == "InternalStreamFailure":
        return VoiceCliError(f"SageMaker broke the stream from the {where} ({message}). Retry.")
    if code == "ModelError":
        return VoiceCliError(f"The container behind the {where} failed the request: {message}")
    if code in ("ServiceUnavailableError", "ServiceUnavailable"):
        return VoiceCliError(f"The {where} is unavailable ({message}). Retry later.")
    if code in ACCESS:
        return VoiceCliError(
            f"AWS refused access to the {where} ({code}: {message}). Check your "
            "credentials and the sagemaker:InvokeEndpoint* permissions."
        )
    return VoiceCliError(f"The {where} failed: {code or 'error'}: {message}")


def explain_aws_error(exc: BaseException, endpoint: str, region: str | None) -> VoiceCliError:
    """A VoiceCliError saying what to do about a failed boto3 SageMaker call."""
    from botocore.exceptions import (
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ReadTimeoutError,
    )

    where = f"SageMaker endpoint {endpoint!r} in {region or 'the default region'}"
    if isinstance(exc, VoiceCliError):
        return exc
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return VoiceCliError(
            "No AWS credentials found. Run `aws configure` (or `aws sso login`), or set "
            "AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY."
        )
    if isinstance(exc, NoRegionError):
        return VoiceCliError(
            "No AWS region is set for the SageMaker endpoint. Pass --region, "
            "or set AWS_REGION, or add a region to your AWS profile."
        )
    if isinstance(exc, EndpointConnectionError | ConnectTimeoutError):
        return VoiceCliError(
            f"Cannot reach the SageMaker runtime for {where}: {exc}. "
            "Check the network and the region."
        )
    if isinstance(exc, ReadTimeoutError):
        return VoiceCliError(f"The {where} stopped answering: {exc}. It may be overloaded.")
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return explain_code(
            error.get("Code", "") or type(exc).__name__, error.get("Message", "") or str(exc), where
        )
    return VoiceCliError(f"The {where} failed: {type(exc).__name__}: {exc}.")
