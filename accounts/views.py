"""Account pages: sign-up, consent, settings (API tokens), a team's page (members,
invite links) and the page an invite link opens. Log-in/out are Django's."""

from functools import wraps
from urllib.parse import urlsplit

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UsernameField
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import Resolver404, resolve, reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_http_methods
from rest_framework import authentication, exceptions

from accounts.authentication import ApiTokenAuthentication
from accounts.models import ApiToken, TeamInvite
from accounts.selectors import (
    consent_is_current,
    team_invites,
    team_members,
    user_is_owner,
    user_memberships,
    user_team,
    user_teams,
)
from accounts.services import (
    api_token_create,
    api_token_revoke,
    consent_accept,
    consent_terms_current,
    team_invite_accept,
    team_invite_check,
    team_invite_create,
    team_invite_find,
    team_invite_revoke,
    team_member_remove,
    user_sign_up,
)
from accounts.throttling import SIGN_UPS, too_many
from arena_site.exceptions import ApplicationError, error_body
from arena_site.ratelimit import client_address


class SignUpForm(forms.Form):
    """The sign-up form. It never looks up whether the username or the team name is
    taken: its errors (a bad character, a short or common password, a mismatch) are the
    same for a taken name as for a free one (``user_sign_up`` decides, silently)."""

    username = UsernameField(
        max_length=150,
        validators=[UnicodeUsernameValidator()],
        help_text="Letters, digits and @/./+/-/_ only; at most 150 characters.",
        widget=forms.TextInput(attrs={"autocomplete": "username", "autofocus": True}),
    )
    password1 = forms.CharField(
        label="Password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text=password_validation.password_validators_help_text_html(),
    )
    password2 = forms.CharField(
        label="Password confirmation",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text="Enter the same password as before, for verification.",
    )
    team_name = forms.CharField(
        max_length=100,
        required=False,
        help_text="Optional: the team you submit for (default: your username).",
    )

    def __init__(self, *args, invited: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if invited:  # the invite's team is theirs: no team of their own
            del self.fields["team_name"]

    def clean_team_name(self) -> str:
        return self.cleaned_data["team_name"].strip() or self.cleaned_data.get("username", "")

    def clean(self) -> dict:
        data = super().clean()
        password, again = data.get("password1"), data.get("password2")
        if password and again and password != again:
            self.add_error("password2", "The two password fields didn't match.")
        elif password:
            probe = get_user_model()(username=data.get("username", ""))
            try:
                password_validation.validate_password(password, probe)
            except forms.ValidationError as problems:
                self.add_error("password1", problems)
        return data


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
    """A valid form is answered the same whether its names were free (the account is
    made) or taken (nothing is made): a redirect to the log-in page, which says so
    (docs/security.md "Sign-up"). The new user logs in there, then gives consent; an
    invite link (or any page) that sent them here comes after."""
    invite = _invite_in(_safe_next(request, ""))
    form = SignUpForm(request.POST or None, invited=invite is not None)
    if request.method == "POST" and form.is_valid():
        retry = SIGN_UPS.hit(client_address(request))
        if retry is not None:
            return too_many(
                request,
                what=f"Too many new accounts from your address: at most {SIGN_UPS.limit} an hour.",
                retry_after_s=retry,
            )
        user_sign_up(
            username=form.cleaned_data["username"],
            password=form.cleaned_data["password1"],
            team_name=form.cleaned_data.get("team_name", ""),
            invited=invite is not None,
        )
        query = {"signed_up": "1"}
        if target := _safe_next(request, ""):
            query["next"] = target
        return redirect(f"{reverse('accounts:login')}?{urlencode(query)}")
    context = {"form": form, "next": _safe_next(request, ""), "invite": invite}
    return render(request, "accounts/signup.html", context)


def _invite_in(target: str) -> TeamInvite | None:
    """The invite whose link ``target`` is (the page that sent the visitor to sign up),
    if it still admits someone; else None (sign-up then makes a team of their own)."""
    try:
        match = resolve(urlsplit(target).path) if target else None
    except Resolver404:
        return None
    if match is None or match.view_name != "accounts:invite":
        return None
    try:
        invite = team_invite_find(match.kwargs["token"])
        team_invite_check(invite)
    except ApplicationError:
        return None
    return invite


@login_required
@require_http_methods(["GET"])
def my_team(request: HttpRequest) -> HttpResponse:
    """The navigation's "Team": the page of the user's one team, or the list of theirs."""
    memberships = user_memberships(request.user)
    if len(memberships) == 1:
        return redirect("accounts:team", pk=memberships[0].team_id)
    return render(request, "accounts/teams.html", {"memberships": memberships})


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
            return redirect(_safe_next(request, reverse("judging:landing")))
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
        {
            "tokens": tokens,
            "new_token": new_token,
            "teams": user_teams(request.user),
            "memberships": user_memberships(request.user),
        },
    )


class InviteCreateForm(forms.Form):
    max_uses = forms.IntegerField(
        min_value=1,
        max_value=TeamInvite.MAX_USES,
        initial=1,
        label="People it admits",
        help_text=f"1 to {TeamInvite.MAX_USES}; each joins as a member.",
    )
    days = forms.IntegerField(
        min_value=1,
        max_value=TeamInvite.MAX_DAYS,
        initial=TeamInvite.DEFAULT_DAYS,
        label="Valid for (days)",
        help_text=f"1 to {TeamInvite.MAX_DAYS}.",
    )


def _refused(
    request: HttpRequest,
    refused: ApplicationError,
    heading: str = "This invite link cannot be used",
) -> HttpResponse:
    """A rule said no: the site's page with the rule's words and its status."""
    context = {"heading": heading, "message": refused.message}
    return render(request, "accounts/invite_refused.html", context, status=refused.status)


def _invite_url(request: HttpRequest, plain: str) -> str:
    return request.build_absolute_uri(reverse("accounts:invite", args=[plain]))


@login_required
@require_http_methods(["GET", "POST"])
def team_page(request: HttpRequest, pk: int) -> HttpResponse:
    """A team's members; for its owners also its invite links (create, revoke). Owners
    remove members; anyone leaves (the last owner cannot). Another team's page is a
    404, like a missing one; a member who is not an owner sees the members only and is
    refused (403) the invite actions and removing others."""
    team = user_team(request.user, pk)
    if team is None:
        raise Http404("No such team among yours.")
    owner = user_is_owner(request.user, team)
    form = InviteCreateForm()
    new_link = None
    status = 200
    if request.method == "POST":
        try:
            if request.POST.get("action") == "create":
                form = InviteCreateForm(request.POST)
                if form.is_valid():
                    _, plain = team_invite_create(
                        team=team,
                        actor=request.user,
                        max_uses=form.cleaned_data["max_uses"],
                        days=form.cleaned_data["days"],
                    )
                    new_link = _invite_url(request, plain)
                    form = InviteCreateForm()
                else:
                    status = 400
            elif request.POST.get("action") == "revoke":
                invite = TeamInvite.objects.filter(team=team, pk=request.POST.get("invite")).first()
                if invite is None:
                    raise Http404("No such invite of this team.")
                team_invite_revoke(invite=invite, actor=request.user)
                messages.success(
                    request, f"Invite {invite.hint}… revoked: the link admits nobody now."
                )
            elif request.POST.get("action") == "remove":
                member = team.memberships.filter(user_id=request.POST.get("user")).first()
                if member is None:
                    raise Http404("No such member of this team.")
                team_member_remove(team=team, member=member.user, actor=request.user)
                if member.user_id == request.user.pk:
                    messages.success(request, f"You left team {team.name}.")
                    return redirect("accounts:settings")
                messages.success(request, f"{member.user.username} is no longer in the team.")
        except ApplicationError as refused:
            heading = (
                "This member cannot be removed"
                if refused.code == "last_owner"
                else "Only the team's owners can do this"
            )
            return _refused(request, refused, heading=heading)
        except ValueError:  # an id that is not a number
            raise Http404("No such invite or member of this team.") from None
    now = timezone.now()
    invites = [(i, i.state(now)) for i in team_invites(team)] if owner else []
    return render(
        request,
        "accounts/team.html",
        {
            "team": team,
            "owner": owner,
            "members": team_members(team),
            "invites": invites,
            "form": form,
            "new_link": new_link,
        },
        status=status,
    )


@require_http_methods(["GET", "POST"])
def invite_join(request: HttpRequest, token: str) -> HttpResponse:
    """The page an invite link opens. A link that is not (or no longer) valid says so
    to anyone who has it; a valid one asks a visitor to sign in or sign up first, a
    signed-in user to accept the current consent terms first, then offers to join."""
    try:
        invite = team_invite_find(token)
        team_invite_check(invite)
    except ApplicationError as refused:
        return _refused(request, refused)
    here = request.get_full_path()
    if not request.user.is_authenticated:
        return render(request, "accounts/invite.html", {"invite": invite, "next": here})
    if not consent_is_current(request.user):
        return redirect(f"{reverse('accounts:consent')}?{urlencode({'next': here})}")
    if request.method == "POST":
        try:
            team_invite_accept(plain=token, user=request.user)
        except ApplicationError as refused:
            return _refused(request, refused)
        messages.success(request, f"You joined team {invite.team.name} as a member.")
        return redirect(reverse("accounts:team", args=[invite.team_id]))
    already = invite.team.memberships.filter(user=request.user).exists()
    return render(request, "accounts/invite.html", {"invite": invite, "already": already})
