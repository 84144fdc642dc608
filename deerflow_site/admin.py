import copy

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import DELETION
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from core.console_actions import StaffAction, service_call
from deerflow_site.models import ApiKey
from deerflow_site.services import api_key_issue, api_keys_revoke
from deerflow_site.user_erase import user_erase, user_holdings


class ApiKeyCreateForm(forms.Form):
    """Who gets the new key, and a label to tell it apart."""

    user = forms.ModelChoiceField(queryset=get_user_model().objects.order_by("username"))
    name = forms.CharField(max_length=100, required=False, help_text="A label, e.g. the client that will use it.")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """API keys: who has one, when it was last used; a secret is shown once, when a superuser creates it."""

    list_display = ("prefix", "user", "name", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    list_select_related = ("user",)
    search_fields = ("user__username", "name", "prefix")
    readonly_fields = ("prefix", "digest", "created_at", "last_used_at")
    fields = ("user", "name", "prefix", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    def has_add_permission(self, request) -> bool:
        # A key is an identity: only a superuser hands one out.
        return request.user.is_active and request.user.is_superuser

    def add_view(self, request, form_url="", extra_context=None):
        """Create a key for a chosen user and show it once, on this page; it is never shown again."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = ApiKeyCreateForm(request.POST or None)
        context = {**self.admin_site.each_context(request), "opts": self.opts, "form": form, "title": "Add API key"}
        if request.method == "POST" and form.is_valid():
            key, raw = api_key_issue(user=form.cleaned_data["user"], name=form.cleaned_data["name"])
            self.log_addition(request, key, [{"added": {"name": "API key", "object": str(key)}}])
            context.update(raw_key=raw, key=key, title="API key created")
        return TemplateResponse(request, "admin/deerflow_site/apikey/create.html", context)

    # A revoke changes a key: an account that may only view keys is not offered it.
    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke(self, request, queryset):
        revoked = api_keys_revoke(keys=queryset)
        for key in revoked:
            self.log_change(request, key, "Revoked")
        self.message_user(request, f"Revoked {len(revoked)} key(s).")


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class ConsoleUserAdmin(UserAdmin):
    """Django's user admin, plus "Erase user…": a preview of everything the user owns, then the erase, audited."""

    change_form_template = "admin/deerflow_site/user/change_form.html"

    def get_urls(self):
        view = self.admin_site.admin_view
        return [path("<path:object_id>/erase/", view(self.erase_view), name="auth_user_erase"), *super().get_urls()]

    def erase_view(self, request, object_id):
        """GET: count what the user owns and ask; POST with the username typed again: erase it all."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        user = self.get_object(request, unquote(object_id))
        if user is None:
            raise Http404(f"User {object_id} not found")
        if not self.has_delete_permission(request, user):
            raise PermissionDenied("Erasing a user needs the auth.delete_user permission.")
        cancel_runs = request.POST.get("cancel_runs") == "yes"
        if request.method == "POST" and request.POST.get("confirm_username") == user.username:
            audit = StaffAction(
                target=copy.copy(user),  # the erase clears the instance's pk; the log entry keeps the id
                what=f"Erased user {user.username}",
                flag=DELETION,
                describe=lambda holdings: holdings.summary(),
            )
            done, _ = service_call(
                request, user_erase, audit=audit, user=user, by=request.user, cancel_runs=cancel_runs
            )
            if done:
                messages.success(request, f"Erased {user.username} and everything they owned.")
                return HttpResponseRedirect(reverse("admin:auth_user_changelist"))
        elif request.method == "POST":
            messages.error(request, f"Type {user.username} to confirm the erase.")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Erase {user.username}",
            "subject": user,
            "holdings": user_holdings(user=user),
            "threads": user.threads.order_by("-updated_at")[:20],
            "refused": user.is_staff or user.is_superuser or user.pk == request.user.pk,
        }
        return TemplateResponse(request, "admin/deerflow_site/user/erase.html", context)
