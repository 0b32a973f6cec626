"""Account pages: sign-up, consent, settings (API tokens). Log-in/out are Django's."""

from functools import wraps

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UserCreationForm
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods
from rest_framework import authentication, exceptions

from accounts.authentication import ApiTokenAuthentication
from accounts.models import ApiToken, Team
from accounts.selectors import consent_is_current, user_teams
from accounts.services import (
    api_token_create,
    api_token_revoke,
    consent_accept,
    consent_terms_current,
    user_sign_up,
)
from accounts.throttling import SIGN_UPS, too_many
from arena_site.exceptions import error_body
from arena_site.ratelimit import client_address


class SignUpForm(UserCreationForm):
    team_name = forms.CharField(
        max_length=100,
        required=False,
        help_text="Optional: the team you submit for (default: your username).",
    )

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username",)

    def clean_team_name(self) -> str:
        name = self.cleaned_data["team_name"].strip() or self.cleaned_data.get("username", "")
        if name and Team.objects.filter(name__iexact=name).exists():
            raise forms.ValidationError("That team name is taken; choose another.")
        return name


def consent_required(view):
    """Sends a signed-in user whose consent is not current to the consent page first."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs):
        if not consent_is_current(request.user):
            return redirect(f"{reverse('accounts:consent')}?next={request.get_full_path()}")
        return view(request, *args, **kwargs)

    return login_required(wrapper)


def consent_required_or_token(view):
    """``consent_required`` for a page or file that API responses link to (screenshots,
    delivered files, attachments, run pages): a request with ``Authorization: Bearer``
    is authenticated by its token as the API is, and refused as the API refuses, in the
    JSON envelope (401 for a bad token, 429 once an address spent its bad tokens, 403
    without current consent); a request without one gets the session's redirects. What
    the user may see is the view's own check either way."""
    gated = consent_required(view)

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() not in (b"bearer", b"token"):
            return gated(request, *args, **kwargs)
        try:
            user, _ = ApiTokenAuthentication().authenticate(request)
        except exceptions.Throttled as exc:
            retry = int(exc.wait or 1)
            body = error_body("rate_limited", str(exc.detail), retry_after=retry)
            return JsonResponse(body, status=429, headers={"Retry-After": str(retry)})
        except exceptions.AuthenticationFailed as exc:
            return JsonResponse(
                error_body("not_authenticated", str(exc.detail)),
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="api"'},
            )
        request.user = user
        if not consent_is_current(user):
            message = "Accept the current publication consent terms first."
            body = error_body("consent_required", message, consent_url=reverse("accounts:consent"))
            return JsonResponse(body, status=403)
        return view(request, *args, **kwargs)

    return wrapper


def _safe_next(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return default


@require_http_methods(["GET", "POST"])
def sign_up(request: HttpRequest) -> HttpResponse:
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        retry = SIGN_UPS.hit(client_address(request))
        if retry is not None:
            return too_many(
                request,
                what=f"Too many new accounts from your address: at most {SIGN_UPS.limit} an hour.",
                retry_after_s=retry,
            )
        user = user_sign_up(
            username=form.cleaned_data["username"],
            password=form.cleaned_data["password1"],
            team_name=form.cleaned_data["team_name"],
        )
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect(reverse("accounts:consent"))
    return render(request, "accounts/signup.html", {"form": form})


@login_required
@require_http_methods(["GET", "POST"])
def consent(request: HttpRequest) -> HttpResponse:
    terms = consent_terms_current()
    if request.method == "POST" and terms is not None:
        if str(terms.version) != request.POST.get("version"):
            messages.error(
                request, "The terms changed while you were reading; read the new version."
            )
        else:
            consent_accept(user=request.user, terms=terms)
            return redirect(_safe_next(request, reverse("battles:submit")))
    return render(
        request,
        "accounts/consent.html",
        {
            "terms": terms,
            "current": consent_is_current(request.user),
            "next": _safe_next(request, ""),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def account_settings(request: HttpRequest) -> HttpResponse:
    new_token = None
    if request.method == "POST":
        if request.POST.get("action") == "create":
            name = (request.POST.get("name") or "default").strip()[:100]
            _, new_token = api_token_create(user=request.user, name=name)
        elif request.POST.get("action") == "revoke":
            token = ApiToken.objects.filter(user=request.user, pk=request.POST.get("token")).first()
            if token is not None:
                api_token_revoke(token=token)
                messages.success(request, f"Token {token.hint}… revoked.")
    tokens = ApiToken.objects.filter(user=request.user).order_by("-created_at")
    return render(
        request,
        "accounts/settings.html",
        {"tokens": tokens, "new_token": new_token, "teams": user_teams(request.user)},
    )
