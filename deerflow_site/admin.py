from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse

from deerflow_site.models import ApiKey
from deerflow_site.services import api_key_issue, api_keys_revoke


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

    @admin.action(description="Revoke selected keys")
    def revoke(self, request, queryset):
        revoked = api_keys_revoke(keys=queryset)
        for key in revoked:
            self.log_change(request, key, "Revoked")
        self.message_user(request, f"Revoked {len(revoked)} key(s).")
